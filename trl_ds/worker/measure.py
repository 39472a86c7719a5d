"""What each rank really holds, measured the same way the estimate is made: model-state bytes counted from the engine's
own tensors, each storage once, by device; peak RSS (CPU) and peak allocated/reserved (GPU) for the process.
"""
import json
import os
import resource
from typing import Dict, Iterable

GiB = 2 ** 30


def measure_rank(trainer, rank: int) -> Dict:
    engine = getattr(trainer, "deepspeed", None) or trainer.model_wrapped
    states = model_state_bytes(engine)

    params = engine.module.parameters()
    # DPO / GRPO's reference engine (trl/models/utils.py prepare_deepspeed), apart from the policy's model states
    report = {**peak_memory(rank), "model_states": states,
              "reference": reference_bytes(getattr(trainer, "ref_model", None)),
              "parameters": sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in params)}
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
    report["optimizer_class"] = type(inner).__name__  # FusedAdam, DeepSpeedCPUAdam or torch's AdamW
    import torch

    # What this rank computed with: its share of the node's cores (worker/cores.py) when its launcher set none.
    report["threads"] = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()}
    if isinstance(getattr(engine, "config", None), dict):  # what the engine was built from, vs ds_config.json
        report["deepspeed_config"] = json.loads(json.dumps(engine.config, default=str))
    return report


def peak_memory(rank: int) -> Dict:
    """This process's peak RSS, and on a GPU the allocator's peak allocated and reserved bytes."""
    import torch

    report = {"rank": rank, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch.cuda.is_available():
        report["gpu_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        report["gpu_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    from trl_ds.worker.gpu_cap import applied_cap  # cluster.gpu_memory_gb's cap on this rank, when one was set

    report.update(applied_cap())
    return report


def model_state_bytes(engine) -> Dict[str, Dict[str, int]]:
    """Bytes per component and device: {"params": {"cpu": n}, "gradients": {...}, "optimizer": {...}}."""
    seen = set()
    counts: Dict[str, Dict[str, int]] = {"params": {}, "gradients": {}, "optimizer": {}}

    def add(kind: str, tensors: Iterable) -> None:
        import torch

        for t in tensors:
            if not torch.is_tensor(t) or t.numel() == 0:
                continue
            storage = t.untyped_storage()
            key = (t.device.type, storage.data_ptr())
            if key in seen:
                continue
            seen.add(key)
            counts[kind][t.device.type] = counts[kind].get(t.device.type, 0) + storage.nbytes()

    params = list(engine.module.parameters())
    add("params", (getattr(p, "ds_tensor", p.data) for p in params))
    # ZeRO-3 keeps parameters below stage3_param_persistence_threshold whole on every rank, beside their partition.
    add("params", (p.data for p in params))
    add("params", (t for m in engine.module.modules() for t in module_quant_tensors(m)))
    add("gradients", (p.grad for p in params))
    optimizer = engine.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)
    add("gradients", _flatten(getattr(optimizer, "averaged_gradients", None)))
    # Persistent gradient partitions: ZeRO-3's flat buffer, and ZeRO-1/2 offload's pinned fp32 .grad.
    add("gradients", _flatten(getattr(optimizer, "grad_partitions_flat_buffer", None)))
    for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        add("optimizer", _flatten(getattr(optimizer, attr, None)))
        add("gradients", (t.grad for t in _flatten(getattr(optimizer, attr, None))))
    if inner is not None:
        add("optimizer", (q for group in inner.param_groups for q in group["params"]))
        add("optimizer", (v for state in inner.state.values() for v in state.values()))
    return counts


def quant_state_tensors(p) -> list:
    """bitsandbytes' constants of a quantized weight: attributes, not parameters, whole on every rank."""
    state = getattr(p, "quant_state", None)
    if state is None:
        return [getattr(p, "SCB", None)]
    nested = getattr(state, "state2", None)
    return [state.absmax, state.code, state.offset] + ([nested.absmax, nested.code] if nested is not None else [])


def module_quant_tensors(module) -> list:
    """A bitsandbytes layer's constants: its weight's, and LLM.int8's scales in its MatmulLtState."""
    weight = getattr(module, "weight", None)
    state = getattr(module, "state", None)
    return (quant_state_tensors(weight) if weight is not None else []) + [getattr(state, "SCB", None)]


def reference_bytes(ref_model) -> Dict[str, int]:
    """Bytes per device of a reference model's parameters: its ZeRO-3 partitions (ds_tensor) and whatever it holds
    whole (every parameter below ZeRO-3, the persistent small ones under it), each storage once."""
    if ref_model is None:
        return {}
    import torch

    module = getattr(ref_model, "module", ref_model)
    seen, out = set(), {}
    for p in module.parameters():
        for t in (getattr(p, "ds_tensor", None), p.data):
            if not torch.is_tensor(t) or t.numel() == 0:
                continue
            key = (t.device.type, t.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                out[t.device.type] = out.get(t.device.type, 0) + t.untyped_storage().nbytes()
    return out


def _flatten(value) -> list:
    if value is None:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    return [value]
