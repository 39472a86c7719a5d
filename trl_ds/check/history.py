"""A run dir holds one run's history: what it has trained decides what a new launch in it may do.

- resume=never where checkpoints or metrics already are: refused, because a second history in the same folder would
  mix metrics.jsonl, and rotation (newest `keep_last` by step) would delete the new run's checkpoints against the
  old run's higher steps, after which resume=auto would continue the old run.
- The same command after the run completed: it says so and trains nothing (a raised trainer.max_steps continues).
"""
import os
from typing import List, Optional

from trl_ds.rundir.checkpoint import checkpoints
from trl_ds.rundir.layout import CHECKPOINT_DIR, METRICS, SUMMARY, read_json


def check_history(cfg, run_dir: str) -> List[str]:
    if cfg.resume == "auto":
        return []
    found = [os.path.basename(c) for c in checkpoints(os.path.join(run_dir, CHECKPOINT_DIR))]
    if os.path.isfile(os.path.join(run_dir, METRICS)):
        found.append(METRICS)
    if not found:
        return []
    shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    return [f"resume=never, but hydra.run.dir={run_dir} already holds a run's history ({shown}); a run dir holds one "
            f"run. Use resume=auto to continue that run, or a new hydra.run.dir to start over."]


def finished_run(cfg, run_dir: str) -> Optional[str]:
    """A sentence when this run dir's run already completed trainer.max_steps (and resume=auto), else None."""
    path = os.path.join(run_dir, SUMMARY)
    if cfg.resume != "auto" or not os.path.isfile(path):
        return None
    summary = read_json(path)
    steps = summary.get("steps")
    if summary.get("status") != "completed" or steps is None or steps < cfg.trainer.max_steps:
        return None
    return (f"the run in {run_dir} is complete ({steps} steps, trainer.max_steps={cfg.trainer.max_steps}); nothing "
            f"to train. Raise trainer.max_steps to continue it, or use a new hydra.run.dir for another run.")
