"""deepspeed.from_file: the blocks of a DeepSpeed JSON that choose a parallelism or a number format (AutoTP, ALST,
fp8), mapped onto trl_ds's tp / sp / precision groups or refused with the reason. imp is deepspeed_json.Importer.
"""
from typing import Any, Dict

TILING = "trl_ds does not tile the MLP and the loss (ALST's TiledMLP and tiled logits; same losses, more activation " \
         "memory). Set it to false"
NOT_DEEPSPEEDS = "LLaMA-Factory's own ALST option (DeepSpeed reads no sequence_parallel block); trl_ds has none. " \
                 "Set it to false"


def tensor_parallel(imp, block: Dict[str, Any]) -> None:
    """DeepSpeed AutoTP training: autotp_size is trl_ds's tp=autotp tp.size=N."""
    for name, v in block.items():
        where = f"tensor_parallel.{name}"
        if name == "autotp_size":
            imp.map(where, v, "tp.name", "autotp")
            imp.map(where, v, "tp.size")
        elif name == "preset_model":
            imp.note(where, v, "trl_ds writes the model family's preset itself (docs/parallelism.md)")
        else:
            imp.refuse(where, v, "trl_ds writes tensor_parallel from tp=autotp tp.size=N only; drop the key")


def sequence_parallel(imp, block: Dict[str, Any]) -> None:
    """LLaMA-Factory's ALST block (its own, DeepSpeed never reads it): Ulysses of size N is trl_ds's sp=ulysses."""
    if block.get("enabled") is not True:
        return imp.note("sequence_parallel", block, "not enabled; not written")
    if block.get("mode", "ulysses") != "ulysses":
        return imp.refuse("sequence_parallel.mode", block["mode"], "trl_ds's sequence parallelism is DeepSpeed "
                                                                   "Ulysses (sp=ulysses); write \"ulysses\"")
    ulysses = block.get("ulysses", {})
    size = block.get("size", ulysses.get("degree"))
    imp.map("sequence_parallel.mode", "ulysses", "sp.name", "ulysses")
    imp.map("sequence_parallel.size", size, "sp.size")
    for name, v in ulysses.items():
        where = f"sequence_parallel.ulysses.{name}"
        if name == "degree" and v != size:
            imp.refuse(where, v, f"differs from sequence_parallel.size {size}; write the same number")
        elif name == "seq_length_is_variable":
            imp.note(where, v, "trl_ds always tells Ulysses that lengths vary (right for any lengths)")
        elif name != "degree":
            imp.refuse(where, v, NOT_DEEPSPEEDS.replace("Set it to false", "Drop the key"))
    for name in ("tiling", "memory_optimizations"):
        if isinstance(block.get(name), dict) and block[name].get("enabled") is True:
            imp.refuse(f"sequence_parallel.{name}.enabled", True, TILING if name == "tiling" else NOT_DEEPSPEEDS)
    for name, v in block.items():
        if name not in ("enabled", "mode", "size", "ulysses", "tiling", "memory_optimizations"):
            imp.refuse(f"sequence_parallel.{name}", v, NOT_DEEPSPEEDS.replace("Set it to false", "Drop the key"))


def fp8(imp, block: Dict[str, Any]) -> None:
    if block.get("enabled") is not True:
        return imp.note("fp8", block, "not enabled; not written")
    imp.refuse("fp8.enabled", True, "DeepSpeed 0.19.8 reads no fp8 block and trl_ds trains in fp32, fp16 or bf16; "
                                    "drop the block (precision=bf16 for 16-bit training)")


def auto_cast(imp, key: str, v: Any) -> None:
    """DeepSpeed's fp16.auto_cast casts floating-point forward inputs only (engine._cast_inputs_half); bf16 has none."""
    absent = " (DeepSpeed's bf16 block has no such key)" if key != "fp16" else ""
    imp.note(f"{key}.auto_cast", v, f"the trainers' forward inputs are token ids and masks, which DeepSpeed never "
                                    f"casts: it changes nothing{absent}; not written")


BLOCKS = {"tensor_parallel": tensor_parallel, "sequence_parallel": sequence_parallel, "fp8": fp8}
