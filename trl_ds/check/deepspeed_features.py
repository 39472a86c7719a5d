"""The DeepSpeed memory features trl_ds names (offload.ratio, precision.bf16_*, ZeRO++ parts, ZenFlow), each checked
against the stage, offload and device it needs, as DeepSpeed's own code refuses them (file and check cited), and
where DeepSpeed would silently ignore them (a key in a block that is not written, or not read at that stage)."""
from typing import List

from trl_ds.check.deepspeed_keys import show
from trl_ds.config.values import dtype, offloads, value, world_size


def check_offload_ratio(cfg) -> List[str]:
    ratio, stage, device = cfg.offload.ratio, cfg.zero.stage, offloads(cfg)["optimizer"]
    if not 0.0 <= ratio <= 1.0:  # offload_config.py: Field(1.0, ge=0.0, le=1.0)
        return [f"offload.ratio={ratio} must be between 0 and 1 (the fraction of the optimizer offloaded). "
                f"Use e.g. offload.ratio=0.5, or offload.ratio=1 for all of it."]
    if ratio == 1.0:
        return []
    problems = []
    if stage != 3:  # zero/config.py offload_ratio_check: "Partial offloading only supported for ZeRO Stage 3."
        problems.append(f"offload.ratio={ratio} needs zero=stage3 (got zero.stage={stage}); DeepSpeed offloads part "
                        f"of the optimizer only at stage 3. Use zero=stage3, or offload.ratio=1.")
    if device != "cpu":  # stage3.py: sub-groups go to 'cpu' or the device; NVMe swaps every sub-group
        problems.append(f"offload.ratio={ratio} splits the optimizer between the device and the CPU, and "
                        f"offload.optimizer={device} here. Use offload=cpu, or offload.ratio=1.")
    return problems or _coarse_split(cfg)


def _coarse_split(cfg) -> List[str]:
    """DeepSpeed offloads whole sub-groups, so with few per rank the share can be far from the ratio."""
    from trl_ds.errors import ConfigError
    from trl_ds.plan.memory import setup_from_config
    from trl_ds.plan.optimizer_places import auto_sub_group_size, offloaded_fraction

    try:
        setup = setup_from_config(cfg)
    except ConfigError:  # the model's own problem is reported by its rule
        return []
    ratio, size = cfg.offload.ratio, cfg.zero.sub_group_size
    offloaded = offloaded_fraction(setup)  # the planner's split: ZeRO partitions over every rank but tp's
    if abs(offloaded - ratio) <= 0.1:
        return []
    return [f"offload.ratio={ratio} moves whole optimizer sub-groups: each rank's {setup.trainable // setup.world:,} "
            f"trainable parameters in sub-groups of zero.sub_group_size={size} would offload {offloaded:.0%} of the "
            f"optimizer, not {ratio:.0%}. Set zero.sub_group_size={auto_sub_group_size(setup)} (about ten sub-groups "
            f"per rank), or offload.ratio=1."]


def check_bf16_options(cfg) -> List[str]:
    p, stage, device = cfg.precision, cfg.zero.stage, offloads(cfg)["optimizer"]
    if p.get("bf16_optimizer_auto", False) and dtype(cfg) != "bf16":  # under bf16 auto-fit has replaced it
        return [f"precision.bf16_optimizer_auto=true needs precision=bf16 (precision in force: {dtype(cfg)}): the "
                f"16-bit optimizer options live in DeepSpeed's bf16 block. Use precision=bf16 on a GPU cluster, or "
                f"remove precision.bf16_optimizer_auto=true."]
    chosen = [k for k in ("bf16_master_weights_and_grads", "bf16_optimizer_states") if p[k]]
    if not chosen:
        return []
    names = " and ".join(f"precision.{k}=true" for k in chosen)
    if dtype(cfg) != "bf16":  # they live in the bf16 block, read only when bf16 is enabled
        return [f"{names} needs precision=bf16 (precision in force: {dtype(cfg)}). Use precision=bf16 on a GPU "
                f"cluster, or remove {names}."]
    problems = []
    if stage == 0:  # runtime/config.py _do_error_check: "... only supported with ZeRO Stage 1, 2, or 3."
        problems.append(f"{names} needs a ZeRO stage of 1 to 3 (got zero.stage=0). Use zero=stage1, stage2 or stage3.")
    if p.bf16_optimizer_states and not p.bf16_master_weights_and_grads:  # runtime/config.py, base_optimizer.py
        problems.append("precision.bf16_optimizer_states=true needs precision.bf16_master_weights_and_grads=true "
                        "(DeepSpeed keeps Adam's moments in the master weights' dtype). Set both.")
    elif p.bf16_master_weights_and_grads and not p.bf16_optimizer_states and device == "none":
        # base_optimizer._configure_master_weights -> stage_1_and_2 / stage3 _enforce_*_offload: fp32 moments with
        # bf16 master weights must live in DeepSpeedCPUAdam
        problems.append("precision.bf16_master_weights_and_grads=true with fp32 optimizer states needs "
                        "offload.optimizer=cpu (DeepSpeed's CPU Adam keeps them). Use offload=cpu, or add "
                        "precision.bf16_optimizer_states=true to keep everything on the device in bf16.")
    if p.bf16_master_weights_and_grads and cfg.zero.zenflow is not None:  # type(optimizer) must be DeepSpeedCPUAdam
        problems.append("precision.bf16_master_weights_and_grads=true does not work with zero.zenflow (DeepSpeed "
                        "requires its plain CPU Adam, ZenFlow brings its own). Remove one of them.")
    return problems


def check_zeropp_parts(cfg) -> List[str]:
    z = cfg.zero
    parts = [f"zero.{k}=true" for k in ("zero_quantized_weights", "zero_quantized_gradients",
                                        "zero_quantized_nontrainable_weights") if z[k]]
    hpz = z.zero_hpz_partition_size
    problems = []
    if hpz < 1:
        problems.append(f"zero.zero_hpz_partition_size={hpz} must be at least 1 (1: no secondary partition).")
    elif hpz > 1:
        parts.append(f"zero.zero_hpz_partition_size={hpz}")
        world = world_size(cfg)
        if world % hpz:  # utils/groups.py _create_zero_param_parallel_group: world % group size == 0
            problems.append(f"zero.zero_hpz_partition_size={hpz} must divide the world of {world} ranks; it is "
                            f"usually the GPUs of one node: zero.zero_hpz_partition_size={cfg.cluster.gpus_per_node}.")
    if parts and z.stage != 3:  # only the stage-3 optimizer and zero.Init read them (runtime/engine.py)
        problems.append(f"{' and '.join(parts)} need zero=stage3 (got zero.stage={z.stage}); DeepSpeed reads "
                        f"ZeRO++ settings only at stage 3. Use zero=stage3, or remove them.")
    quantized = [p for p in parts if "quantized" in p]
    if quantized and value(cfg.cluster.device) != "cuda":
        problems.append(f"{' and '.join(quantized)} quantize with CUDA kernels, and cluster.device=cpu here. Use a "
                        f"GPU cluster such as cluster=1x8, or remove them.")
    return problems


def check_zenflow(cfg) -> List[str]:
    chosen = cfg.zero.zenflow
    if chosen is None or not hasattr(chosen, "items"):
        return []
    problems = []
    stage, device = cfg.zero.stage, offloads(cfg)["optimizer"]
    if stage not in (1, 2) or device != "cpu":
        # zenflow_stage_1_and_2.py _configure_zenflow: "Zenflow must be used with cpu offload". At stage 3,
        # zenflow/engine_stage3.py transposes each weight before DeepSpeed partitions it and the forward hooks
        # (parameter_offload.py) transpose the gathered ones back; transformers has partitioned the model already
        # (zero.Init), so the first forward gets transposed weights. Its column selection also allocates on 'cuda'.
        why = (": DeepSpeed's ZenFlow at ZeRO-3 transposes the weights of a model that transformers has already "
               "partitioned, so the first forward fails") if stage == 3 else ""
        problems.append(f"zero.zenflow={show(dict(chosen))} needs offload.optimizer=cpu with zero=stage1 or stage2 "
                        f"(got zero.stage={stage}, offload.optimizer={device}){why}. Use zero=stage2 offload=cpu.")
    if chosen.get("offload") and not cfg.zero.overlap_comm:  # zenflow engine: offload needs overlap_comm
        problems.append("zero.zenflow.offload=true needs zero.overlap_comm=true (DeepSpeed's ZenFlow asserts it).")
    return problems
