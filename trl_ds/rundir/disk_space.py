"""Disk space for a run dir: the estimate before launch, and one clear line when a write finds the disk full or
read-only. A checkpoint holds DeepSpeed's model and optimizer states (12 B per trainable parameter) and
model.safetensors; keep_last + 1 checkpoints exist at the peak (the next is written before the oldest goes).
"""
import errno
import os
import shutil
from typing import Optional

from trl_ds.rundir.checkpoint import checkpoints, is_complete
from trl_ds.rundir.layout import CHECKPOINT_DIR

MiB = 2 ** 20
FULL = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
# How a full disk reads when it comes through torch's C++ writer or the Rust safetensors writer, not as an OSError.
FULL_TEXT = ("No space left on device", "file write failed", "iostream error", "Read-only file system",
             "os error 28", "os error 30")


def checkpoint_bytes(setup) -> int:
    return 2 * setup.width * setup.total_params + 12 * setup.trainable


def space_warning(cfg, setup, run_dir: str) -> Optional[str]:
    """A warning naming what the checkpoints and final model need and what the run dir's disk has, when short."""
    every = cfg.checkpoint.every_steps > 0 or cfg.checkpoint.get("every_epoch", False)
    one = checkpoint_bytes(setup)
    final = setup.width * setup.total_params if cfg.save_final_model else 0
    need = (cfg.checkpoint.keep_last + 1) * one * every + final
    folder = existing_folder(run_dir)
    free = shutil.disk_usage(folder).free
    if need <= free:
        return None
    return (f"checkpoints and the final model need about {need / MiB:.1f} MiB (checkpoint.keep_last="
            f"{cfg.checkpoint.keep_last} + 1 being written, {one / MiB:.1f} MiB each; final model {final / MiB:.1f} "
            f"MiB), but {folder} has {free / MiB:.1f} MiB free. Free space there, lower checkpoint.keep_last, or "
            f"use a hydra.run.dir on a larger disk.")


def existing_folder(path: str) -> str:
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def is_disk_full(err: BaseException) -> bool:
    """An OSError with ENOSPC/EROFS/EDQUOT anywhere in the chain, or a C++/Rust writer's text for the same."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in FULL:
            return True
        if any(text in str(err) for text in FULL_TEXT):
            return True
        err = err.__cause__ or err.__context__
    return False


def kept(run_dir: str) -> str:
    """What the run dir still holds that a rerun can use."""
    done = [os.path.basename(c) for c in checkpoints(os.path.join(run_dir, CHECKPOINT_DIR)) if is_complete(c)]
    return f"complete checkpoints kept: {', '.join(done)}" if done else "no complete checkpoint"


def remove_incomplete(run_dir: str) -> Optional[str]:
    """Delete checkpoints without a marker (a save cut short: resume ignores them) to give the disk back."""
    removed = []
    for checkpoint in checkpoints(os.path.join(run_dir, CHECKPOINT_DIR)):
        if not is_complete(checkpoint):
            shutil.rmtree(checkpoint, ignore_errors=True)
            removed.append(os.path.basename(checkpoint))
    return ", ".join(removed) or None


def full_disk_line(path: str, run_dir: str, err: BaseException) -> str:
    folder = existing_folder(path)
    free = shutil.disk_usage(folder).free
    what = "read-only" if "Read-only" in str(err) or getattr(err, "errno", None) == errno.EROFS else "full"
    return f"the disk is {what} writing {path} ({folder} has {free / MiB:.1f} MiB free); {kept(run_dir)}"
