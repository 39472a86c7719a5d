"""`python -m trl_ds.check_equivalence`, the old form of `trl-ds check-equivalence`, kept so scripts keep working: runs
trl_ds.study.equivalence."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.study.equivalence", run_name="__main__", alter_sys=True)
