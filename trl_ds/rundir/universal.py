"""Resume on another cluster shape: a ZeRO checkpoint is partitioned by world size and stage (and at stage 3 by the
optimizer's sub-groups), so one written by another shape is converted once to DeepSpeed's universal format inside
the checkpoint (`global_stepN_universal`, named by `latest_universal`), with its own completion marker. A finished
one that verifies is reused; anything else (a `.partial` folder, no or a cut marker, a mismatching file) is removed
and redone. The conversion dies with the process that started it.
"""
import os
import shutil
import subprocess
import sys
from typing import Optional

from trl_ds.rundir.checkpoint import _write_atomic, file_sizes, read_marker
from trl_ds.rundir.layout import LATEST_UNIVERSAL, UNIVERSAL_MARKER, read_json_or_none
from trl_ds.rundir.lifeline import die_with_parent

# The file a ZeRO-3 engine's universal load reads its metadata from (engine._get_all_ckpt_names with
# pp_placeholder "0"); stages 0-2 read mp_rank_00_model_states.pt. The weights come from zero/ in both cases.
ZERO3_MODEL_STATES = "zero_pp_rank_0_mp_rank_00_model_states.pt"
# The conversion's limit: a fixed start-up share, then per GiB of the checkpoint it reads (a hang, e.g. in its worker
# pool, ends there instead of holding the launch and every node waiting on it without end)
CONVERT_BASE_S = 600
CONVERT_S_PER_GIB = 120


def convert_limit_s(source: str) -> int:
    """Seconds the conversion of the folder `source` may take."""
    gib = sum(file_sizes(source).values()) / 2 ** 30 if os.path.isdir(source) else 0.0
    return int(CONVERT_BASE_S + CONVERT_S_PER_GIB * gib)


def sub_groups(cfg) -> Optional[int]:
    """zero.sub_group_size where it partitions the checkpoint: ZeRO-3 saves its optimizer state per sub-group
    (stage3.py _rigid_state_dict), so another size does not load as it is; stages 0-2 have no sub-groups."""
    return cfg.zero.sub_group_size if cfg.zero.stage == 3 else None


def shape_change(checkpoint: str, world_size: int, zero_stage: int, sub_group_size: Optional[int] = None
                 ) -> Optional[str]:
    """How the checkpoint's shape differs from this launch's, in words; None when it loads as it is."""
    marker = read_marker(checkpoint)
    now = (world_size, zero_stage, sub_group_size)
    saved_sub_groups = marker.get("sub_group_size")
    saved = (marker["world_size"], marker.get("zero_stage", zero_stage),
             sub_group_size if saved_sub_groups is None else saved_sub_groups)
    if saved == now:
        return None
    return f"written by {_shape(saved, now)}; this launch has {_shape(now, saved)}"


def _shape(shape: tuple, other: tuple) -> str:
    """`world size 2 with ZeRO stage 3`, and its sub-groups where both shapes have them and they differ."""
    sub_groups_differ = None not in (shape[2], other[2]) and shape[2] != other[2]
    return f"world size {shape[0]} with ZeRO stage {shape[1]}" + \
        (f" and zero.sub_group_size={shape[2]}" if sub_groups_differ else "")


def ensure_universal(checkpoint: str) -> tuple:
    """Convert checkpoint-N/global_stepN to checkpoint-N/global_stepN_universal unless done; (folder, converted)."""
    step = read_marker(checkpoint)["step"]
    tag = f"global_step{step}_universal"
    folder = os.path.join(checkpoint, tag)
    if converted_whole(folder) and _read(os.path.join(checkpoint, LATEST_UNIVERSAL)) == tag:
        return folder, False
    partial = f"{folder}.partial"
    for leftover in (partial, folder):  # of a conversion cut short at any moment: redone from scratch
        shutil.rmtree(leftover, ignore_errors=True)
    # --inject_missing_state: checkpoints saved through transformers lack the universal_checkpoint_info DeepSpeed needs.
    # Paths relative to the checkpoint (its cwd): the converter globs them, and a run dir's name may hold [ * ?.
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    f"global_step{step}", "--output_folder", os.path.basename(partial),
                    "--inject_missing_state", "--num_extract_workers", "1", "--num_merge_workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, cwd=checkpoint, preexec_fn=die_with_parent(),
                   timeout=convert_limit_s(os.path.join(checkpoint, f"global_step{step}")))
    loadable_by_zero3(partial)
    os.replace(partial, folder)
    _write_atomic(os.path.join(folder, UNIVERSAL_MARKER), {"step": step, "files": file_sizes(folder)})
    with open(f"{checkpoint}/{LATEST_UNIVERSAL}.tmp", "w") as f:
        f.write(tag)
    os.replace(f"{checkpoint}/{LATEST_UNIVERSAL}.tmp", os.path.join(checkpoint, LATEST_UNIVERSAL))
    return folder, True


def converted_whole(folder: str) -> bool:
    """The folder's marker is readable and every file it lists is there with its size."""
    marker = read_json_or_none(os.path.join(folder, UNIVERSAL_MARKER))
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        return False
    return {rel: size for rel, size in file_sizes(folder).items() if rel != UNIVERSAL_MARKER} == marker["files"]


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def loadable_by_zero3(folder: str) -> None:
    """A universal folder converted from a stage 0-2 checkpoint, made loadable by a ZeRO-3 engine too: DeepSpeed's
    stage-3 load also reads the model-state file under ZeRO-3's name and the torch optimizer's state dict (Adam's
    step, its param group), both added from what the conversion wrote."""
    import torch

    if not os.path.exists(os.path.join(folder, ZERO3_MODEL_STATES)):
        os.link(os.path.join(folder, "mp_rank_00_model_states.pt"), os.path.join(folder, ZERO3_MODEL_STATES))
    zero = os.path.join(folder, "zero")
    path = os.path.join(zero, "optimizer_state.pt")
    state = torch.load(path, weights_only=False)
    if "optimizer_state_dict" not in state and "param_groups" in state:
        first = next(name for name in sorted(os.listdir(zero)) if os.path.isdir(os.path.join(zero, name)))
        step = torch.load(os.path.join(zero, first, "step.pt"), weights_only=False)
        state["optimizer_state_dict"] = {"state": {0: {"step": step}}, "param_groups": state["param_groups"]}
        torch.save(state, path)
