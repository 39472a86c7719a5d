"""A run dir holds one run's history: what it has trained decides what a new launch in it may do.

- resume=never where checkpoints or metrics already are: refused (two histories would mix metrics.jsonl, and
  rotation would delete the new run's checkpoints against the old run's higher steps).
- The same command after the run completed: it says so and trains nothing (a raised trainer.max_steps continues).
- trainer.max_steps (or num_train_epochs' steps) below the newest complete checkpoint: refused with both numbers.
- A summary.json that a kill left empty or cut is ignored (the launch rewrites it).
"""
import os
from typing import List, Optional

from trl_ds.config.batch import Batch
from trl_ds.config.training_steps import describe, training_steps
from trl_ds.rundir.checkpoint import checkpoints, is_complete, step_of
from trl_ds.rundir.layout import CHECKPOINT_DIR, METRICS, RESOLVED_CONFIG, SUMMARY, read_json_or_none, read_yaml_or_none


def check_history(cfg, run_dir: str, batch: Optional[Batch] = None) -> List[str]:
    if cfg.resume == "auto":
        newest = newest_complete(run_dir)  # what resume would load
        return check_max_steps(cfg, newest) + check_epochs(cfg, newest, batch) + check_writable(run_dir)
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
    summary = read_json_or_none(os.path.join(run_dir, SUMMARY))
    if cfg.resume != "auto" or not isinstance(summary, dict):
        return None
    steps = summary.get("steps")
    if summary.get("status") != "completed" or not isinstance(steps, int):
        return None
    if cfg.trainer.max_steps <= 0:  # epochs: complete unless trainer.num_train_epochs was raised since
        epochs = cfg.trainer.num_train_epochs
        saved = (read_yaml_or_none(os.path.join(run_dir, RESOLVED_CONFIG)) or {}).get("trainer") or {}
        if not isinstance(saved.get("num_train_epochs"), (int, float)) or epochs > saved["num_train_epochs"]:
            return None
        return (f"the run in {run_dir} is complete ({steps} steps, trainer.num_train_epochs={epochs}); nothing to "
                f"train. Raise trainer.num_train_epochs to continue it, or use a new hydra.run.dir for another run.")
    if steps < cfg.trainer.max_steps:
        return None
    return (f"the run in {run_dir} is complete ({steps} steps, trainer.max_steps={cfg.trainer.max_steps}); nothing "
            f"to train. Raise trainer.max_steps to continue it, or use a new hydra.run.dir for another run.")


def check_writable(run_dir: str) -> List[str]:
    """The checkpoints' folder must take new checkpoints: found at the first save otherwise, after training."""
    folder = os.path.join(run_dir, CHECKPOINT_DIR)
    if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
        return [f"{folder} is not writable, so no checkpoint of this launch could be saved. Make it writable "
                f"(chmod u+w {folder}) or use another hydra.run.dir."]
    return []


def newest_complete(run_dir: str) -> Optional[str]:
    done = [c for c in checkpoints(os.path.join(run_dir, CHECKPOINT_DIR)) if is_complete(c)]
    return done[-1] if done else None


def check_max_steps(cfg, newest_dir: Optional[str]) -> List[str]:
    """trainer.max_steps below the newest complete checkpoint, which resume would load: refused with the numbers."""
    max_steps = cfg.trainer.max_steps
    if max_steps <= 0 or not newest_dir or step_of(newest_dir) <= max_steps:
        return []
    newest = step_of(newest_dir)
    return [f"trainer.max_steps={max_steps} is below this run's newest checkpoint ({newest_dir}, step {newest}): "
            f"resuming would train past step {max_steps}, and keeping checkpoint.keep_last would delete older "
            f"checkpoints. Use trainer.max_steps={newest} or more to continue this run, or a new hydra.run.dir "
            f"for a run of {max_steps} steps."]


def check_epochs(cfg, newest_dir: Optional[str], batch: Optional[Batch]) -> List[str]:
    """trainer.num_train_epochs whose steps end before the newest complete checkpoint: refused."""
    if cfg.trainer.max_steps > 0 or batch is None or not newest_dir:
        return []
    training = training_steps(cfg, batch)
    planned, newest = training["optimizer_steps"], step_of(newest_dir)
    if planned is None or newest <= planned:
        return []
    epochs, enough = cfg.trainer.num_train_epochs, newest / training["steps_per_epoch"]
    return [f"trainer.num_train_epochs={epochs} is {describe(training)}, which ends before this run's newest "
            f"checkpoint ({newest_dir}, step {newest}). Use trainer.num_train_epochs={enough:g} or more to continue "
            f"this run, or a new hydra.run.dir for a run of {epochs} epochs."]
