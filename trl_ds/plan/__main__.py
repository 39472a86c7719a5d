"""`python -m trl_ds.plan`: `trl-ds plan` (trl_ds/cli/plan.py). It belongs to the cli layer: it imports only trl_ds.cli
and nothing imports it, so importing trl_ds.plan never reaches cli (tests/unit/test_layers.py).
"""
import sys

from trl_ds.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
