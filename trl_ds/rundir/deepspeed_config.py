"""The DeepSpeed JSON: concrete numbers only (no "auto"), so DeepSpeed checks every key."""
from typing import Any, Dict

from omegaconf import OmegaConf

from trl_ds.config.batch import Batch
from trl_ds.config.deepspeed_names import block_names
from trl_ds.config.values import dtype, offloads, sp_size, undeclared, value
from trl_ds.rundir.layout import nvme_path
from trl_ds.rundir.tensor_parallel import add_tensor_parallel

ZERO_COMMON = ("overlap_comm", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size")
ZERO_1_2 = ("allgather_bucket_size", "round_robin_gradients")
ZERO_3 = ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
          "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save", "sub_group_size")
ZEROPP = ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
          "zero_quantized_nontrainable_weights")
BF16_OPTIONS = ("bf16_master_weights_and_grads", "bf16_optimizer_states")


def build_ds_config(cfg, batch: Batch, run_dir: str) -> Dict[str, Any]:
    precision = dtype(cfg)
    ds: Dict[str, Any] = {
        "train_batch_size": batch.global_size, "train_micro_batch_size_per_gpu": batch.micro,
        "gradient_accumulation_steps": batch.accumulation, "gradient_clipping": cfg.trainer.max_grad_norm,
        "zero_optimization": _zero_block(cfg, run_dir), "optimizer": _optimizer_block(cfg),
        "bf16": _bf16_block(cfg, precision), "fp16": _fp16_block(cfg) if precision == "fp16" else {"enabled": False},
        # trl_ds logs metrics itself; max_steps=-1 (epochs) trains an unknown number of steps here
        "steps_per_print": cfg.trainer.max_steps + 1 if cfg.trainer.max_steps > 0 else 2 ** 31 - 1,
        "wall_clock_breakdown": False,
    }
    if "nvme" in offloads(cfg).values():
        ds["aio"] = dict(cfg.offload.aio)
    if sp_size(cfg) > 1:
        # DeepSpeed derives the global batch from micro × accumulation × (world / sequence_parallel_size); a stated
        # one would fail transformers' check, which multiplies by the whole world.
        ds["sequence_parallel_size"] = sp_size(cfg)
        del ds["train_batch_size"]
    add_tensor_parallel(cfg, ds)  # tp=autotp: the tensor_parallel block and the keys it changes
    # deepspeed.NAME: any other top-level block by DeepSpeed's name (those trl_ds derives are refused before this)
    ds.update(OmegaConf.to_container(cfg.deepspeed) if cfg.deepspeed else {})
    return ds


def _bf16_block(cfg, precision: str) -> Dict[str, Any]:
    block: Dict[str, Any] = {"enabled": precision == "bf16"}
    block.update({k: True for k in BF16_OPTIONS if cfg.precision[k]})
    return block


def _zero_block(cfg, run_dir: str) -> Dict[str, Any]:
    z = cfg.zero
    block: Dict[str, Any] = {"stage": z.stage}
    if z.stage == 0:  # a +zero.NAME is written even here: what DeepSpeed makes of it at stage 0 is its own
        return {**block, **undeclared(cfg, "zero")}
    keys = ZERO_COMMON + (ZERO_3 if z.stage == 3 else ZERO_1_2)
    block.update({k: z[k] for k in keys})
    if z.stage == 3:
        block.update(_zeropp_keys(cfg))
    if z.zenflow is not None:
        block["zenflow"] = OmegaConf.to_container(z.zenflow) if OmegaConf.is_config(z.zenflow) else z.zenflow
    block.update(undeclared(cfg, "zero"))  # DeepSpeed's own zero_optimization names, checked before this
    where = offloads(cfg)
    if where["optimizer"] != "none":
        block["offload_optimizer"] = _offload_optimizer(cfg, where["optimizer"], run_dir)
    if where["param"] != "none":
        block["offload_param"] = _offload_param(cfg, where["param"], run_dir)
    return block


def _zeropp_keys(cfg) -> Dict[str, Any]:
    """ZeRO++: a secondary weight partition inside each node (hpZ), quantized weights (qwZ) and gradients (qgZ);
    zero.zeropp=true turns on all three, each part also on its own. Only the parts in use are written."""
    z = cfg.zero
    parts = {k: z[k] for k in ZEROPP}
    if z.zeropp:
        parts.update(zero_quantized_weights=True, zero_quantized_gradients=True)
        if parts["zero_hpz_partition_size"] == 1:
            parts["zero_hpz_partition_size"] = cfg.cluster.gpus_per_node
    if parts["zero_hpz_partition_size"] == 1:  # 1: no secondary partition
        del parts["zero_hpz_partition_size"]
    return {k: v for k, v in parts.items() if v is not False}


def _offload_optimizer(cfg, device: str, run_dir: str) -> Dict[str, Any]:
    block = {"device": device, "pin_memory": cfg.offload.pin_memory}
    if device == "nvme":
        block["nvme_path"] = optimizer_nvme_path(cfg, run_dir)
    if cfg.offload.ratio != 1.0:
        block["ratio"] = cfg.offload.ratio
    return {**block, **_offload_extra(cfg, "offload_optimizer")}


def optimizer_nvme_path(cfg, run_dir: str) -> str:
    """Where the optimizer swaps: its own folder where one is given, else the parameters' (rundir/layout.py)."""
    return cfg.offload.get("optimizer_nvme_path") or nvme_path(cfg, run_dir)


def _offload_extra(cfg, block: str) -> Dict[str, Any]:
    """offload.NAME by DeepSpeed's name, into each offload block in use whose class accepts it."""
    return {k: v for k, v in undeclared(cfg, "offload").items() if k in block_names(block)}


def _offload_param(cfg, device: str, run_dir: str) -> Dict[str, Any]:
    o = cfg.offload
    block = {"device": device, "pin_memory": o.pin_memory, "buffer_count": o.buffer_count,
             "buffer_size": o.buffer_size, "max_in_cpu": o.max_in_cpu}
    if device == "nvme":
        block["nvme_path"] = nvme_path(cfg, run_dir)
    return {**block, **_offload_extra(cfg, "offload_param")}


def _optimizer_block(cfg) -> Dict[str, Any]:
    t = cfg.trainer
    params: Dict[str, Any] = {"lr": t.learning_rate, "betas": [t.adam_beta1, t.adam_beta2],
                              "eps": t.adam_epsilon, "weight_decay": t.weight_decay}
    # Offloaded optimizers run DeepSpeed's CPU Adam; on a CPU cluster without offload FusedAdam cannot build.
    if offloads(cfg)["optimizer"] == "none" and value(cfg.cluster.device) == "cpu":
        params["torch_adam"] = True
    return {"type": "AdamW", "params": params}


def _fp16_block(cfg) -> Dict[str, Any]:
    p = cfg.precision
    return {"enabled": True, "loss_scale": 0, "initial_scale_power": p.initial_scale_power,
            "loss_scale_window": p.loss_scale_window, "hysteresis": p.hysteresis, "min_loss_scale": p.min_loss_scale}
