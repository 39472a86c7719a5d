"""`python -m trl_ds.report`, the old form of `trl-ds report`, kept so scripts keep working: runs
trl_ds.study.report."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.study.report", run_name="__main__", alter_sys=True)
