"""Checkpoints that are complete or clearly not: write, then mark; resume from the newest one that verifies.

No transformers import: the launcher reads checkpoints before anything spawns. After every rank has saved
`checkpoint-N/`, rank 0 writes the marker atomically, listing every file and its size; a checkpoint without one is
ignored and rotated away, and one whose files no longer match it is set aside, never loaded nor rotated.
"""
import json
import os
import re
import shutil
import time
from typing import Dict, List, Optional, Tuple

from trl_ds.rundir.layout import CHECKPOINT_MARKER as MARKER
from trl_ds.rundir.layout import DAMAGED_SUFFIX

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


def mark_complete(checkpoint: str, step: int, world_size: int, zero_stage: int,
                  sub_group_size: Optional[int] = None) -> None:
    """sub_group_size: ZeRO-3's optimizer sub-groups (rundir/universal.py sub_groups), None below stage 3."""
    _write_atomic(os.path.join(checkpoint, MARKER), {"step": step, "world_size": world_size, "zero_stage": zero_stage,
                                                     "sub_group_size": sub_group_size,
                                                     "files": file_sizes(checkpoint)})


def file_sizes(folder: str) -> Dict[str, int]:
    """Every file under folder (relative path -> bytes), the marker itself excepted."""
    sizes = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if rel != MARKER:
                sizes[rel] = os.path.getsize(path)
    return dict(sorted(sizes.items()))


def verify(checkpoint: str) -> Optional[str]:
    """None if every file the marker lists is there with its size, else the first difference, in words."""
    try:
        marker = read_marker(checkpoint)
    except (OSError, ValueError):  # a kill or a full disk while it was written by an older trl_ds
        marker = None
    if not isinstance(marker, dict) or not isinstance(marker.get("step"), int):
        return f"its marker {MARKER} is empty or cut short"
    for rel, size in marker.get("files", {}).items():
        path = os.path.join(checkpoint, rel)
        if not os.path.isfile(path):
            return f"{rel} is missing"
        have = os.path.getsize(path)
        if have != size:
            return f"{rel} has {have} bytes, its marker says {size}"
    return None


def newest_verified(output_dir: str) -> Tuple[Optional[str], List[Tuple[str, str]]]:
    """(the newest complete checkpoint that verifies, [(newer damaged checkpoint, why), ...])."""
    damaged = []
    for checkpoint in reversed([c for c in checkpoints(output_dir) if is_complete(c)]):
        problem = verify(checkpoint)
        if problem is None:
            return checkpoint, damaged
        damaged.append((checkpoint, problem))
    return None, damaged


def set_aside(checkpoint: str) -> str:
    """Rename a damaged checkpoint so nothing loads, overwrites or rotates it; return its new path."""
    target = f"{checkpoint}{DAMAGED_SUFFIX}-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(checkpoint, target)
    return target


def fallback_line(chosen: Optional[str], damaged: List[Tuple[str, str]], moved: List[str]) -> str:
    """One line: which checkpoint resume takes, and why not the newer ones."""
    why = "; ".join(f"{os.path.basename(c)} fails verification ({problem}), set aside as {os.path.basename(m)}"
                    for (c, problem), m in zip(damaged, moved))
    target = f"resuming from {chosen}" if chosen else "no other complete checkpoint: starting from step 0"
    return f"trl_ds: {why}; {target}"


def rotate(output_dir: str, keep_last: int) -> None:
    """Delete all but the newest `keep_last` complete checkpoints, and any incomplete one older than those."""
    complete = [c for c in checkpoints(output_dir) if is_complete(c)]
    keep = set(complete[-keep_last:])
    newest = complete[-1] if complete else None
    for path in checkpoints(output_dir):
        if path not in keep and (is_complete(path) or (newest and step_of(path) < step_of(newest))):
            shutil.rmtree(path, ignore_errors=True)


def step_of(path: str) -> int:
    """The step in a checkpoint-N folder's name."""
    return int(_STEP.match(os.path.basename(path)).group(1))


def _write_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
