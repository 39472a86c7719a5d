"""`python -m trl_ds.plan`: `trl-ds plan` (the command is trl_ds/cli/plan.py: it checks each row as the launch does)."""
import sys

from trl_ds.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
