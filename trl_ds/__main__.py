"""`python -m trl_ds [overrides]` is `trl-ds run [overrides]` (trl_ds/cli/run.py): Hydra overrides, -m sweeps."""
from trl_ds.cli.run import main

if __name__ == "__main__":
    main()
