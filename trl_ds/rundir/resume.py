"""Which checkpoint a launch resumes from, made ready before any rank loads it, each decision said in one line: newer
ones that fail verification are set aside, one from another cluster shape is converted to the universal format. The
launcher does this before spawning, and rank 0 again at start (the work when launch.sh is run directly).
"""
from typing import List, Optional, Tuple

from trl_ds.rundir.checkpoint import fallback_line, newest_verified, set_aside
from trl_ds.rundir.universal import ensure_universal, shape_change


def prepare_resume(output_dir: str, world_size: int, zero_stage: int, sub_group_size: Optional[int] = None
                   ) -> Tuple[Optional[str], bool, List[str]]:
    """(checkpoint to resume from or None, load it in the universal format, lines to print)."""
    chosen, damaged = newest_verified(output_dir)
    lines = [fallback_line(chosen, damaged, [set_aside(c) for c, _ in damaged])] if damaged else []
    change = shape_change(chosen, world_size, zero_stage, sub_group_size) if chosen else None
    if change:
        folder, converted = ensure_universal(chosen)
        done = "converted it to DeepSpeed's universal format in" if converted else "its universal format is in"
        lines.append(f"trl_ds: {chosen} was {change}: {done} {folder}; resuming from it")
    elif chosen and not damaged:
        lines.append(f"trl_ds: resuming from {chosen}")
    return chosen, bool(change), lines
