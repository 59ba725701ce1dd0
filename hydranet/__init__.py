"""hydranet."""
