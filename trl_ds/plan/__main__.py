"""`python -m trl_ds.plan`: `trl-ds plan` (the command is trl_ds/cli/plan.py: it checks each row as the launch does).

Python looks for this file inside the plan package, but it belongs to the cli layer: it holds only the entry point,
imports only trl_ds.cli, and nothing imports it, so importing trl_ds.plan never reaches cli (tests/unit/test_layers.py).
"""
import sys

from trl_ds.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
