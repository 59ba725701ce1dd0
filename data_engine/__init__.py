"""data_engine."""
