"""`python -m trl_ds.cli COMMAND ...` is `trl-ds COMMAND ...`, for environments without the console script."""
import sys

from trl_ds.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
