"""Old form `python -m trl_ds.train RUN_DIR`, which launch.sh files written before the move still run: the rank
worker is trl_ds.worker.train."""
import runpy

if __name__ == "__main__":
    runpy.run_module("trl_ds.worker.train", run_name="__main__", alter_sys=True)
