"""Checkpoints that are complete or clearly not: write, then mark; resume from the newest marked one.

No transformers import here: the launcher reads checkpoints before anything spawns. transformers writes
`checkpoint-N/` (DeepSpeed's shards from every rank, trainer state, RNG states). Only after every rank has finished
does rank 0 write the marker, atomically; a crash while saving leaves a checkpoint without a marker, which resume
ignores and the next rotation deletes.
"""
import json
import os
import re
import shutil
from typing import List, Optional

from trl_ds.build.layout import CHECKPOINT_MARKER as MARKER

_STEP = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(output_dir: str) -> List[str]:
    """All checkpoint-N folders, oldest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := _STEP.match(name))]
    return [os.path.join(output_dir, name) for _, name in sorted(found)]


def is_complete(checkpoint: str) -> bool:
    return os.path.isfile(os.path.join(checkpoint, MARKER))


def latest_complete(output_dir: str) -> Optional[str]:
    done = [c for c in checkpoints(output_dir) if is_complete(c)]
    return done[-1] if done else None


def read_marker(checkpoint: str) -> dict:
    with open(os.path.join(checkpoint, MARKER)) as f:
        return json.load(f)


def mark_complete(checkpoint: str, step: int, world_size: int) -> None:
    _write_atomic(os.path.join(checkpoint, MARKER), {"step": step, "world_size": world_size})


def rotate(output_dir: str, keep_last: int) -> None:
    """Delete all but the newest `keep_last` complete checkpoints, and any incomplete one older than those."""
    complete = [c for c in checkpoints(output_dir) if is_complete(c)]
    keep = set(complete[-keep_last:])
    newest = complete[-1] if complete else None
    for path in checkpoints(output_dir):
        if path not in keep and (is_complete(path) or (newest and _step(path) < _step(newest))):
            shutil.rmtree(path, ignore_errors=True)


def _step(path: str) -> int:
    return int(_STEP.match(os.path.basename(path)).group(1))


def _write_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
