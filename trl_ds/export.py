"""`python -m trl_ds.export`, the old form of `trl-ds export`, kept so scripts keep working: runs
trl_ds.cli.export."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.cli.export", run_name="__main__", alter_sys=True)
