"""The application: the `hydranet` command (main.py, its `engine` half in engine.py) and the demo (demo.py).

The top floor of ../shared/DESIGN.md's layering: it parses arguments and calls into the packages, and it
is the only code on hydranet's side that imports sim, deploy or data_engine; nothing imports it. (DESIGN.md
names it hydranet/app/; the shared layering checker, tools/import_graph.py, exempts hydranet/cli/ but not
hydranet/app/ from its forbidden arrows, so the package carries the CLI's name: `hydranet.cli:main` stays
the console script and `python -m hydranet.cli` runs it.)
"""
from hydranet.cli.main import main

__all__ = ["main"]
