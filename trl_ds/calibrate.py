"""`python -m trl_ds.calibrate`, the old form of `trl-ds calibrate`, kept so scripts keep working: runs
trl_ds.study.calibrate."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.study.calibrate", run_name="__main__", alter_sys=True)
