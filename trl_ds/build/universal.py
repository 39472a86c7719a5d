"""Resume on another cluster shape: a ZeRO checkpoint is partitioned by world size and stage, so one written by
another shape is converted once to DeepSpeed's universal format, kept beside it, and loaded from there.

The converted folder sits inside the checkpoint (`global_stepN_universal`, named by `latest_universal`, which is
where DeepSpeed's `load_universal` looks), with its own completion marker: a conversion that was cut short is redone,
a finished one is reused.
"""
import os
import subprocess
import sys
from typing import Optional

from trl_ds.build.checkpoint import _write_atomic, file_sizes, read_marker
from trl_ds.build.layout import LATEST_UNIVERSAL, UNIVERSAL_MARKER


def shape_change(checkpoint: str, world_size: int, zero_stage: int) -> Optional[str]:
    """How the checkpoint's shape differs from this launch's, in words; None when it loads as it is."""
    marker = read_marker(checkpoint)
    saved = (marker["world_size"], marker.get("zero_stage", zero_stage))
    if saved == (world_size, zero_stage):
        return None
    return (f"written by world size {saved[0]} with ZeRO stage {saved[1]}; this launch has world size {world_size} "
            f"with ZeRO stage {zero_stage}")


def ensure_universal(checkpoint: str) -> tuple:
    """Convert checkpoint-N/global_stepN to checkpoint-N/global_stepN_universal unless done; (folder, converted)."""
    step = read_marker(checkpoint)["step"]
    tag = f"global_step{step}_universal"
    folder = os.path.join(checkpoint, tag)
    if os.path.isfile(os.path.join(folder, UNIVERSAL_MARKER)):
        return folder, False
    partial = f"{folder}.partial"
    # --inject_missing_state: checkpoints saved through transformers lack the universal_checkpoint_info DeepSpeed needs.
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    os.path.join(checkpoint, f"global_step{step}"), "--output_folder", partial,
                    "--inject_missing_state", "--num_extract_workers", "1", "--num_merge_workers", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    if os.path.isdir(folder):  # an unmarked leftover of a conversion that was cut short
        import shutil
        shutil.rmtree(folder)
    os.replace(partial, folder)
    _write_atomic(os.path.join(folder, UNIVERSAL_MARKER), {"step": step, "files": file_sizes(folder)})
    with open(os.path.join(checkpoint, LATEST_UNIVERSAL), "w") as f:
        f.write(tag)
    return folder, True
