"""`python -m trl_ds.env`, the old form of `trl-ds env`, kept so scripts keep working: runs
trl_ds.launch.env."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.launch.env", run_name="__main__", alter_sys=True)
