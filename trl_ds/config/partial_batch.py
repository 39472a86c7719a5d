"""The last batch of an epoch: when the data is not a multiple of the global batch, each epoch ends in a partial
batch, which the shapes of one global batch (ranks × micro × accumulation) split differently: one rank takes the
leftover rows alone, several ranks fill their share by repeating rows from the epoch's start (accelerate's
even_batches). Losses of such shapes part at that step; trainer.dataloader_drop_last=true drops the leftover rows."""
import os
from typing import List, Optional

from trl_ds.config.training_steps import rows_or_none
from trl_ds.config.values import TINY_SIZE

FIX = "Set trainer.dataloader_drop_last=true, or use a dataset whose size is a multiple of the global batch"


def count_rows(dataset_name: str) -> Optional[int]:
    """Rows of the built-in data or a local .jsonl/.json file (counted as the step count counts them: a .json may
    hold JSON Lines, a BOM may lead); None where only loading it would tell."""
    if dataset_name == "tiny":
        return TINY_SIZE
    path = os.path.expanduser(dataset_name)
    return rows_or_none(path) if path.endswith((".jsonl", ".json")) and os.path.isfile(path) else None


def leftover(rows: Optional[int], global_batch: int) -> int:
    return rows % global_batch if rows else 0


def epoch_end_text(rows: Optional[int], global_batch: int, drop_last: bool) -> Optional[str]:
    """One sentence when epochs end in a partial batch; None when they do not, or the size is unknown."""
    left = leftover(rows, global_batch)
    if not left:
        return None
    if drop_last:
        return (f"every epoch trains on the first {rows - left} of {rows} rows, whole global batches of {global_batch} "
                f"(trainer.dataloader_drop_last=true; the last {left} are left out)")
    return (f"each epoch ends in a partial batch: {rows} rows = {rows // global_batch} × {global_batch} + {left}; "
            f"its last step takes the {left} rows left (with several ranks, {global_batch - left} rows from the "
            f"epoch's start are repeated to fill it). {FIX}.")


def boundary_steps(rows: int, global_batch: int, steps: int) -> List[int]:
    """Optimizer steps (1-based) that hold an epoch's partial last batch, without drop_last."""
    per_epoch = -(-rows // global_batch)
    return list(range(per_epoch, steps + 1, per_epoch))


def explain_divergence(step_deviation: List[float], by_point: dict, rows: Optional[int], global_batch: int,
                       rtol: float) -> Optional[str]:
    """Why losses parted at an epoch's partial batch; by_point: name -> per-step deviation from the first."""
    first_bad = next((i + 1 for i, dev in enumerate(step_deviation) if dev > rtol), None)
    left = leftover(rows, global_batch)
    if first_bad is None or not left or first_bad not in boundary_steps(rows, global_batch, len(step_deviation)):
        return None
    names = list(by_point)
    parted = [n for n in names[1:] if by_point[n][first_bad - 1] > rtol]
    same = [n for n in names[1:] if n not in parted]
    return (f"Cause: step {first_bad} is the first to cross the end of the data ({rows} rows, global batch "
            f"{global_batch}: {rows - left} rows used, {left} left over), and {', '.join(parted)} split that partial "
            f"batch differently from {names[0]}" + (f" (as {', '.join(same)} do not)" if same else "")
            + f"; steps 1-{first_bad - 1} agree. Not a trl_ds bug: the last batch of each epoch is split and padded "
            f"across ranks by shape. {FIX} (e.g. {rows - left} or {rows - left + global_batch} rows).")
