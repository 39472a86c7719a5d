"""`python -m trl_ds.build_ops`, the old form of `trl-ds build-ops`, kept so scripts keep working: runs
trl_ds.launch.build_ops."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.launch.build_ops", run_name="__main__", alter_sys=True)
