"""`python -m hydranet.cli ...` runs the `hydranet` command."""
import sys

from hydranet.cli.main import main

sys.exit(main())
