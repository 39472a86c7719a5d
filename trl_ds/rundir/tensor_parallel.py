"""ds_config.json under tp=autotp: DeepSpeed's tensor_parallel block, and the two keys AutoTP changes beside it."""
from typing import Any, Dict

from trl_ds.config.topology import autotp_preset, topology


def add_tensor_parallel(cfg, ds: Dict[str, Any]) -> None:
    """Add `tensor_parallel` to a built ds_config (in place) when tp.size > 1; nothing otherwise."""
    tp = topology(cfg).tp_size
    if tp <= 1:
        return
    # preset_model: the family's layer specs, which keep lm_head whole (why: trl_ds/config/topology.py)
    ds["tensor_parallel"] = {"autotp_size": tp, "preset_model": autotp_preset(cfg.model)}
    # transformers checks a stated train_batch_size against micro × accumulation × the whole world, which counts
    # every tensor-parallel rank as a reader of its own samples; DeepSpeed derives the number when it is absent.
    ds.pop("train_batch_size", None)
    if cfg.save_final_model:
        # accelerate gathers the TP shards into one state dict (engine._consolidated_16bit_state_dict) only when
        # this is set, at any ZeRO stage; otherwise final_model/ would hold a DeepSpeed checkpoint of shards.
        ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
