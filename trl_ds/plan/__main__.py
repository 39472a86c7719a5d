"""`python -m trl_ds.plan`: the planner's command line (trl_ds/plan/planner.py)."""
import sys

from trl_ds.plan.planner import main

if __name__ == "__main__":
    sys.exit(main())
