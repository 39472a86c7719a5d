"""Nothing silent: every key a user adds with Hydra's `+` lands in the file it belongs to or is refused here.

Undeclared `zero.NAME` and `offload.NAME` keys are checked by config/undeclared_keys.py; this module adds the
deepspeed.* (any other top-level block) and zero.zenflow names. Keys trl_ds derives are refused, naming trl_ds's key.
"""
import difflib
from typing import Any, Dict, List

from trl_ds.config.deepspeed_names import block_names, deepspeed_version, top_level_names
from trl_ds.config.undeclared_keys import check_undeclared_keys, schema_paths, show, unknown_key
from trl_ds.config.values import undeclared

__all__ = ["check_undeclared_keys", "schema_paths", "show", "check_deepspeed_block", "check_zenflow_names",
           "passthrough", "DERIVED_TOP"]

# ds_config.json's top-level keys trl_ds writes from its own; deepspeed.NAME for one of them names what to set.
DERIVED_TOP = {
    "train_batch_size": "batch.global_size",
    "train_micro_batch_size_per_gpu": "trainer.per_device_train_batch_size",
    "gradient_accumulation_steps": "trainer.gradient_accumulation_steps or batch.global_size",
    "gradient_clipping": "trainer.max_grad_norm",
    "zero_optimization": "zero.NAME (any zero_optimization key by its own name, e.g. +zero.allgather_partitions=false)",
    "optimizer": "trainer.learning_rate, trainer.adam_beta1/adam_beta2/adam_epsilon and trainer.weight_decay",
    "scheduler": "trainer.lr_scheduler_type and trainer.warmup_steps (the trainer schedules the learning rate)",
    "bf16": "precision=bf16 and precision.bf16_master_weights_and_grads / precision.bf16_optimizer_states",
    "bfloat16": "precision=bf16", "fp16": "precision=fp16 and precision.initial_scale_power (loss scaling)",
    "sequence_parallel_size": "sp=ulysses sp.size=N",
    "tensor_parallel": "tp=autotp tp.size=N (the data-parallel world and the batch follow it)",
    "aio": "offload.aio.NAME (block_size, queue_depth, intra_op_parallelism, single_submit, overlap_events)",
}
def check_deepspeed_block(cfg) -> List[str]:
    """deepspeed.NAME: keys trl_ds derives, and names DeepSpeed never reads, are refused."""
    given = dict(cfg.deepspeed or {})
    known = top_level_names()
    problems = []
    for k, v in given.items():
        if k in DERIVED_TOP:
            problems.append(f"deepspeed.{k}={show(v)}: trl_ds writes {k} into ds_config.json itself. Use "
                            f"{DERIVED_TOP[k]} instead.")
        elif known is not None and k not in known:
            close = difflib.get_close_matches(k, sorted(known), n=1, cutoff=0.6)
            fix = f"Did you mean deepspeed.{close[0]}?" if close else "Remove it (docs/deepspeed-keys.md)."
            problems.append(f"deepspeed.{k}={show(v)}: DeepSpeed {deepspeed_version()} never reads {k} (it would be "
                            f"ignored). {fix}")
    return problems


def check_zenflow_names(cfg) -> List[str]:
    chosen = cfg.zero.zenflow
    if chosen is None:
        return []
    if not hasattr(chosen, "items"):
        return [f"zero.zenflow={show(chosen)} must be a map of DeepSpeed's ZenFlowConfig keys, e.g. "
                f"zero.zenflow={{topk_ratio:0.1}}, or {{}} for DeepSpeed's defaults."]
    names = [n for n in block_names("zenflow") if n != "steps_per_epoch"]  # DeepSpeed sets it at run time
    return [unknown_key("zero.zenflow", k, v, names, "DeepSpeed's ZenFlowConfig")
            for k, v in chosen.items() if k not in names]


def passthrough(cfg) -> Dict[str, Any]:
    """What the config holds beyond trl_ds's own keys (DeepSpeed's verdict is needed when this is not empty)."""
    return {"zero": undeclared(cfg, "zero"), "offload": undeclared(cfg, "offload"),
            "deepspeed": dict(cfg.deepspeed or {}), "zenflow": cfg.zero.zenflow}
