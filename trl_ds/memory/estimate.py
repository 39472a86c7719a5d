"""Memory of one training configuration, before launch: bytes per rank on the device, per node on the host and NVMe.

Moments and places (see ../shared/MEMORY_MODEL.md for the sources of every term):
- `device`: the PEAK per rank during a training step, as the sum of its terms (the activation peak at the start of
  backward and the optimizer-step transients are added, a bound rather than a coincidence). On a GPU cluster this is
  GPU memory; on a CPU cluster (cluster.device=cpu) it is the rank process's share of host RAM.
- `host`: the PEAK per node in host RAM, over loading and training: model states DeepSpeed keeps on the host
  (× DeepSpeed's 1.5 pinned-buffer factor, as its estimators apply it), pinned buffers, and the rank processes.
- `nvme`: bytes per node in the NVMe swap files (ZeRO-Infinity).
- `after_step`: what the engine holds per rank right after an optimizer step (gradients freed), split by the place
  DeepSpeed puts it; the moment trl_ds/memory/measure.py counts, which tests hold to within 1%.

The params/gradients/optimizer terms of `device` and the model-state term of `host` equal DeepSpeed's own
`estimate_zero2/3_model_states_mem_needs` where those apply (stages 2 and 3, mixed precision, cpu offload); stages 0
and 1, fp32 and NVMe follow the ZeRO papers with the same conventions. What DeepSpeed's estimators leave out appears
under `buffers`, itemised in `buffer_items`.
"""
from dataclasses import dataclass, field
from typing import Dict

from ..params import Architecture, ParamCounts
from .coefficients import activation_bytes_per_token, logits_bytes_per_token

GiB = 2 ** 30
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor, applied to host model states only
LOAD_BYTES_PER_PARAM = 4  # without zero.Init every rank materialises the model in fp32 (DeepSpeed's assumption)
CUDA_CONTEXT_BYTES = 1 * GiB  # CUDA context, cuBLAS workspace, NCCL buffers per GPU rank (not measured here)
FRAGMENTATION = 0.10  # caching allocator: reserved is commonly 5-25 % above allocated
CPU_RANK_BYTES = int(0.55 * GiB)  # measured: peak RSS of a tiny 2-rank CPU run is 509-580 MiB per rank
HOST_BYTES_PER_GPU_RANK = 2 * GiB  # host RSS of one GPU rank process (Python, torch, CUDA libraries)
PLACE = {"none": "device", "cpu": "host", "nvme": "nvme"}  # offload device -> where after_step reports it


@dataclass(frozen=True)
class Setup:
    """Everything the estimate depends on, flat, so the planner can vary it with dataclasses.replace."""
    arch: Architecture
    counts: ParamCounts
    stage: int
    optimizer_offload: str  # none | cpu | nvme
    param_offload: str  # none | cpu | nvme
    nodes: int
    gpus_per_node: int
    device: str  # cuda | cpu
    dtype: str  # bf16 | fp16 | fp32 (already resolved from auto)
    micro_batch: int
    seq_len: int
    gradient_checkpointing: bool
    gpu_memory_gb: float
    cpu_memory_gb: float
    reduce_bucket_size: int = 500_000_000
    overlap_comm: bool = True
    prefetch_bucket_size: int = 50_000_000
    persistence_threshold: int = 100_000
    sub_group_size: int = 1_000_000_000
    buffer_count: int = 5
    buffer_size: int = 100_000_000

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def width(self) -> int:
        """Bytes of a parameter (and its gradient) in the training dtype."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def judged_on_host(self) -> bool:
        """CPU clusters (and gpu_memory_gb 0) run ranks in host RAM: judge everything against it."""
        return self.device == "cpu" or self.gpu_memory_gb <= 0


@dataclass
class Estimate:
    setup: Setup
    device: Dict[str, int]  # per rank, peak: params, gradients, optimizer, activations, logits, buffers, overhead
    host: Dict[str, int]  # per node, peak: model_states, buffers, processes
    nvme: int  # per node
    after_step: Dict[str, Dict[str, int]]  # per rank: {params|gradients|optimizer: {device|host|nvme: bytes}}
    buffer_items: Dict[str, int] = field(default_factory=dict)  # per rank, the device buffers by name
    verdict: str = ""

    @property
    def device_total(self) -> int:
        return sum(self.device.values())

    @property
    def host_total(self) -> int:
        """Per node; on a CPU cluster the ranks' own bytes live in host RAM too."""
        ranks = self.device_total * self.setup.gpus_per_node if self.setup.judged_on_host else 0
        return sum(self.host.values()) + ranks

    def model_states(self) -> int:
        return sum(self.device[k] for k in ("params", "gradients", "optimizer"))


def estimate(s: Setup) -> Estimate:
    states, host_states = model_states(s)
    items = device_buffers(s)
    device = {**states, "activations": activations(s), "logits": logits(s), "buffers": sum(items.values())}
    device["overhead"] = overhead(s, sum(device.values()))
    host = {"model_states": host_model_states(s, host_states), "buffers": host_buffers(s),
            "processes": s.gpus_per_node * (0 if s.judged_on_host else HOST_BYTES_PER_GPU_RANK)}
    result = Estimate(setup=s, device=device, host=host, nvme=nvme_bytes(s), after_step=after_step(s),
                      buffer_items=items)
    result.verdict = verdict(result)
    return result


def model_states(s: Setup):
    """Peak per-rank model states on the device, and the per-rank bytes DeepSpeed keeps on the host (cpu or nvme).

    Mixed precision: 2 B params + 2 B grads + 4 B fp32 grads + 12 B (fp32 master + Adam) per parameter, partitioned
    by stage; ZeRO-3 adds the largest module gathered with its gradient (2 × width × L_max).
    """
    psi, n, w, l_max = s.counts.total, s.world, s.width, s.counts.largest_module
    master = 4 if s.dtype != "fp32" or s.stage > 0 else 0  # fp32 without ZeRO steps the parameters themselves
    if s.stage == 0:
        return {"params": w * psi, "gradients": (w + master) * psi, "optimizer": (master + 8) * psi}, 0
    offload_opt = s.optimizer_offload != "none"
    optimizer = 0 if offload_opt else int((master + 8) * psi / n)
    host = int((4 + master + 8) * psi / n) if offload_opt else 0  # fp32 grads, master, Adam
    if s.stage < 3:
        grads16 = w * psi if s.stage == 1 else int(w * psi / n) if not offload_opt else 0
        fp32_grads = 0 if offload_opt else int(4 * psi / n)
        return {"params": w * psi, "gradients": grads16 + fp32_grads, "optimizer": optimizer}, host
    params = w * l_max + (0 if s.param_offload != "none" else int(w * psi / n))
    host += int(w * psi / n) if s.param_offload != "none" else 0
    gradients = w * l_max + (0 if offload_opt else int(4 * psi / n))
    return {"params": params, "gradients": gradients, "optimizer": optimizer}, host


def host_model_states(s: Setup, per_rank_host: int) -> int:
    """Per node: the larger of loading (every rank materialises the model, or one module with zero.Init in stage 3)
    and the states offloaded to CPU, × DeepSpeed's 1.5. NVMe-offloaded states are on disk, not here."""
    if s.judged_on_host:  # CPU ranks: exact bytes, no pinned buffers; the ranks' own training RAM dominates loading
        return per_rank_host * s.gpus_per_node
    loaded = s.counts.largest_module if s.stage == 3 else s.counts.total
    load = LOAD_BYTES_PER_PARAM * loaded * s.gpus_per_node
    on_cpu = per_rank_host * s.gpus_per_node if "nvme" not in (s.optimizer_offload, s.param_offload) else 0
    return int(max(load, on_cpu) * HOST_BUFFER_FACTOR)


def nvme_bytes(s: Setup) -> int:
    """ZeRO-Infinity swap files per node: 16-bit params and/or fp32 master + Adam state (12 B)."""
    psi_node = s.counts.total / s.nodes
    return int((s.width if s.param_offload == "nvme" else 0) * psi_node
               + (12 if s.optimizer_offload == "nvme" else 0) * psi_node)


def activations(s: Setup) -> int:
    """Saved activations of all layers at the start of backward (coefficients measured by
    scripts/measure_activations.py). With checkpointing each layer keeps its input, and one layer is recomputed."""
    tokens = s.micro_batch * s.seq_len
    per_layer = activation_bytes_per_token(s.arch, s.dtype) * tokens
    layers = s.arch.num_hidden_layers
    if s.gradient_checkpointing:
        return layers * s.width * s.arch.hidden_size * tokens + per_layer
    return layers * per_layer


def logits(s: Setup) -> int:
    """The lm_head + cross-entropy peak (fp32 log-probabilities and their gradients); checkpointing keeps it."""
    return int(logits_bytes_per_token(s.arch, s.dtype) * s.micro_batch * s.seq_len)


def device_buffers(s: Setup) -> Dict[str, int]:
    """Per-rank device bytes DeepSpeed's estimators leave out, by name."""
    psi, w, n = s.counts.total, s.width, s.world
    if s.stage == 0:
        return {}
    copies = 2 if s.overlap_comm and s.stage < 3 else 1  # stages 1-2 double-buffer the reduce bucket
    items = {"reduce_bucket": copies * w * min(s.reduce_bucket_size, psi)}
    if s.stage == 3:
        items["prefetch_bucket"] = w * min(s.prefetch_bucket_size, psi)
        items["persistent_params"] = w * s.counts.persistent(s.persistence_threshold)
        if s.optimizer_offload == "none":
            items["grad_partition_16bit"] = int(w * psi / n)
    return items


def host_buffers(s: Setup) -> int:
    """Pinned host bytes per node beside the model states: ZeRO-3's gradient partition when the optimizer is
    offloaded, and the NVMe swap buffers (parameters: buffer_count × buffer_size; optimizer: 4 × sub-group)."""
    psi, n = s.counts.total, s.world
    per_rank = 0
    if s.stage == 3 and s.optimizer_offload != "none":
        per_rank += int(s.width * psi / n)
    if s.param_offload == "nvme":
        per_rank += s.buffer_count * s.buffer_size * s.width
    if s.optimizer_offload == "nvme":
        per_rank += 4 * min(int(psi / n), s.sub_group_size) * 4
    return per_rank * s.gpus_per_node


def overhead(s: Setup, allocated: int) -> int:
    """GPU: CUDA context + allocator fragmentation. CPU: the rank process itself (interpreter, torch, DeepSpeed)."""
    if s.device == "cpu":
        return CPU_RANK_BYTES
    return CUDA_CONTEXT_BYTES + int(FRAGMENTATION * allocated)


def after_step(s: Setup) -> Dict[str, Dict[str, int]]:
    """Bytes the engine's tensors hold per rank after an optimizer step, by kind and place (device|host|nvme).

    params: the parameters or their ZeRO-3 partitions, plus ZeRO-3's persistent small params kept whole.
    gradients: persistent gradient partitions (ZeRO-3's flat buffer; the pinned fp32 gradients of CPU offload).
    optimizer: fp32 master partitions and Adam's two moments.
    """
    psi, n, w = s.counts.total, s.world, s.width
    opt_place, param_place = PLACE[s.optimizer_offload], PLACE[s.param_offload]
    grad_place = "device" if s.optimizer_offload == "none" else "host"
    if s.stage == 0:
        master = 0 if s.dtype == "fp32" else 4 * psi
        return {"params": {"device": w * psi}, "gradients": {}, "optimizer": {"device": master + 8 * psi}}
    optimizer = {opt_place: int(12 * psi / n)}
    offload_grads = int(4 * psi / n) if s.optimizer_offload != "none" else 0
    if s.stage < 3:
        gradients = {grad_place: offload_grads} if offload_grads else {}
        return {"params": {"device": w * psi}, "gradients": gradients, "optimizer": optimizer}
    params = {param_place: int(w * psi / n)}
    persistent = w * s.counts.persistent(s.persistence_threshold)
    params["device"] = params.get("device", 0) + persistent
    return {"params": params, "gradients": {grad_place: int(w * psi / n) + offload_grads}, "optimizer": optimizer}


def verdict(e: Estimate) -> str:
    s = e.setup
    if not s.judged_on_host and e.device_total > s.gpu_memory_gb * GiB:
        return "does not fit"
    if e.host_total > s.cpu_memory_gb * GiB:
        return "does not fit in host RAM"
    return "fits"
