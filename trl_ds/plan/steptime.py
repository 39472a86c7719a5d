"""Seconds per optimizer step of one training configuration, before launch: the planner's speed axis.

Notation as in trl_ds/plan/memory.py: Ψ parameters (Ψ_t trainable), N ranks, w bytes per parameter, A micro-steps
per optimizer step, T tokens per micro-step per rank. Every rate comes from `Hardware` (presets in
trl_ds/plan/hardware/, cluster.hardware.* overrides, or `trl-ds calibrate`). Terms per step, in `StepTime.terms`:
- compute: A × T × F / (peak × efficiency); F = 6 × matmul params (Kaplan et al. 2020) + 12 × L × s × h of attention
  (Narayanan et al. 2021, eq. 3), + one forward with checkpointing; frozen weights (LoRA's base) get no weight
  gradient. The input embedding is a lookup, so untied embeddings are left out.
- communication: the ZeRO paper's volumes (Rajbhandari et al. 2020, sec. 7) as DeepSpeed implements them: stage 0
  all-reduces gradients once per step (2Ψ); stages 1-2 all-reduce the gradient buckets (2Ψ; once per step in stage 1,
  every micro-step in stage 2) and all-gather the updated parameters (Ψ); stage 3 all-gathers parameters in forward
  and backward and reduce-scatters gradients every micro-step (3Ψ). Rings move (N-1)/N per rank, each call costs a
  fixed latency (α-β model), and overlap_comm hides up to comm_overlap of stage 2's reductions behind backward and of
  stage 3's gathers behind the micro-step. AutoTP's all-reduces and Ulysses' all-to-alls are added, unhidden.
- optimizer: Adam streams 28 B per parameter of its partition over hbm_gbps; offloaded, DeepSpeedCPUAdam steps Ψ_t /
  nodes at cpu_adam_mparams_per_s (ZeRO-Offload, Ren et al. 2021); offload.ratio charges both shares in turn.
- offload: host<->device traffic over pcie_gbps and ZeRO-Infinity's NVMe reads and writes.
- zero: DeepSpeed's gradient path beyond its collectives (bucket copies, hooks), Ψ_t × zero{2,3}_ns_per_param per
  micro-step (stage 1: per step); stage 3 adds zero3_us_per_module per gathered module per micro-step, at any world
  size (its fetch/release hooks), host-side work the GPU waits for (docs/autofit.md).
- overhead: micro_step_overhead_ms per micro-step.
- reference (trl_ds/plan/trainers.py): the reference's no-grad forwards (KTO's KL sequences too), which under
  ZeRO-3 gather the model once more each; precompute_ref_log_probs moves them before training.
- generation (GRPO, RLOO): a prefill and max_completion_length decode steps per generation batch, each the larger of
  its FLOPs and reading the model and half the KV cache; under ZeRO-3 one whole-model gather with
  ds3_gather_for_generation, else every module gathered at every decode step.
"""
import os
from dataclasses import dataclass, fields
from typing import Dict, Optional

import yaml

from trl_ds.config.schema import HardwareConfig
from trl_ds.errors import ConfigError
from trl_ds.plan import trainers
from trl_ds.plan.memory import Setup
from trl_ds.plan.optimizer_places import offloaded_fraction
from trl_ds.plan.sequence_parallel import all_to_all_seconds
from trl_ds.plan.tensor_parallel import allreduce_seconds

ADAM_BYTES_PER_PARAM = 28  # fp32 param, grad, exp_avg, exp_avg_sq read; param and both moments written
NVME_OPTIMIZER_BYTES = 12  # fp32 master + two moments per parameter, swapped in and out each step
OPTIONAL = ("collective_latency_us", "comm_overlap", "micro_step_overhead_ms", "zero2_ns_per_param",
            "zero3_ns_per_param", "zero3_us_per_module")  # may be 0; every rate must not


Hardware = HardwareConfig  # the same fields, every one a number once hardware_from_config has resolved them
HARDWARE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hardware")  # the cluster.gpu presets


@dataclass
class StepTime:
    terms: Dict[str, float]  # seconds per step: compute, communication, optimizer, offload, zero, overhead
    samples: int  # samples per optimizer step across the world

    @property
    def seconds(self) -> float:
        return sum(self.terms.values())

    @property
    def per_sample(self) -> float:
        return self.seconds / self.samples


def preset_path(gpu: str) -> str:
    """A preset name of trl_ds/plan/hardware/ or a path to a hardware YAML file."""
    return gpu if gpu.endswith((".yaml", ".yml")) else os.path.join(HARDWARE_DIR, f"{gpu}.yaml")


def read_preset(gpu: str) -> dict:
    path = preset_path(gpu)
    if not os.path.isfile(path):
        names = sorted(f[:-5] for f in os.listdir(HARDWARE_DIR) if f.endswith(".yaml"))
        raise ConfigError([f"cluster.gpu={gpu}: no such preset or file. Use one of {', '.join(names)}, or a file "
                           f"from trl-ds calibrate (cluster.gpu=/path/hardware.yaml)."])
    with open(path) as f:
        return yaml.safe_load(f) or {}


def hardware_from_config(cfg) -> Hardware:
    """cluster.gpu's preset with every non-null cluster.hardware.* on top; a missing number is a ConfigError.
    Memory stays cluster.gpu_memory_gb's (a preset's memory_gb documents the card; it is not read here)."""
    c = cfg.cluster
    preset = read_preset(c.gpu)
    numbers = {f.name: c.hardware.get(f.name) for f in fields(Hardware)}
    numbers = {k: float(v if v is not None else preset.get(k, 0) or 0) for k, v in numbers.items()}
    missing = [k for k in numbers if numbers[k] <= 0 and k not in OPTIONAL]
    if missing:
        raise ConfigError([f"cluster.gpu={c.gpu} gives no {', '.join(missing)}. Set cluster.hardware.{missing[0]}"
                           f"=... or use a complete preset."])
    return Hardware(**numbers)


def flops_per_token(s: Setup) -> float:
    a = s.arch
    # MoE: a token passes through its routed experts only (counts.active); the router's matmul is in it
    matmul = matmul_params(s)
    with_weight_grads = s.adapters.total if s.uses_lora else matmul
    attention = 12 * a.num_hidden_layers * s.seq_len * a.num_attention_heads * a.head_dim
    recompute = 2 * matmul + 4 * a.num_hidden_layers * s.seq_len * a.num_attention_heads * a.head_dim
    return 4 * matmul + 2 * with_weight_grads + attention + (recompute if s.gradient_checkpointing else 0)


def compute_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    return s.tokens * accumulation * flops_per_token(s) / (hw.peak_tflops * 1e12 * hw.efficiency)


def gathered_modules(s: Setup) -> int:
    """Modules ZeRO-3 gathers each pass: tensors above the persistence threshold (small ones stay whole)."""
    return sum(n >= s.persistence_threshold for n in s.counts.tensors)


def collectives(s: Setup, accumulation: int):
    """(bytes moved per rank, collective calls, overlappable bytes) per optimizer step, ring algorithms."""
    n = s.world
    if n == 1:
        return 0.0, 0, 0.0
    ring, grad_bytes = (n - 1) / n, s.trainable * s.width
    buckets = -(-s.trainable // s.reduce_bucket_size)
    if s.stage == 0:  # one all-reduce after accumulation
        return 2 * ring * grad_bytes, buckets, 0.0
    if s.stage == 1:  # all-reduce, then all-gather of the updated partitions, both after accumulation
        return 3 * ring * grad_bytes, 2 * buckets, 0.0
    if s.stage == 2:  # DeepSpeed all-reduces each micro-step's buckets (see the module docstring)
        reduce = 2 * accumulation * ring * grad_bytes
        return reduce + ring * grad_bytes, (accumulation + 1) * buckets, reduce
    volume = accumulation * ring * (2 * s.total_params * s.width + grad_bytes)  # gathers twice, reduce-scatter
    return volume, 3 * accumulation * gathered_modules(s), volume


def communication_seconds(s: Setup, hw: Hardware, accumulation: int, compute: float) -> float:
    moved, calls, overlappable = collectives(s, accumulation)
    bandwidth = hw.intra_node_gbps if s.nodes == 1 else hw.inter_node_gbps
    seconds = moved / (bandwidth * 1e9) + calls * hw.collective_latency_us * 1e-6
    window = compute * (2 / 3 if s.stage == 2 else 1.0)  # stage 2 reduces during backward only
    share = overlappable / moved if moved else 0.0
    hidden = min(seconds * share * (hw.comm_overlap if s.overlap_comm else 0.0), window)
    return seconds - hidden


def optimizer_seconds(s: Setup, hw: Hardware) -> float:
    partition = s.trainable / (1 if s.stage == 0 else s.world)
    if s.optimizer_offload == "none":
        return ADAM_BYTES_PER_PARAM * partition / (hw.hbm_gbps * 1e9)
    # offload.ratio: DeepSpeed steps the sub-groups one after the other, the device's on the GPU, the rest on the CPU
    off = offloaded_fraction(s)
    return ((1 - off) * ADAM_BYTES_PER_PARAM * partition / (hw.hbm_gbps * 1e9)
            + off * s.trainable / s.nodes / (hw.cpu_adam_mparams_per_s * 1e6))


def offload_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """Gradients down and updated parameters up move Ψ_t; parameter fetches move Ψ."""
    trained_bytes, partition_bytes = s.width * s.trainable / s.world, s.width * s.total_params / s.world
    node_params = s.total_params / s.nodes
    seconds = 0.0
    if s.optimizer_offload != "none":
        grads_down = (1 if s.stage == 1 else accumulation) * trained_bytes
        # every gradient goes down (ZeRO-3's gradient partition lives in host RAM); only the offloaded sub-groups'
        # updated parameters come back up
        seconds += (grads_down + offloaded_fraction(s) * trained_bytes) / (hw.pcie_gbps * 1e9)
    if s.param_offload == "cpu":
        seconds += 2 * accumulation * partition_bytes / (hw.pcie_gbps * 1e9)
    if s.optimizer_offload == "nvme":
        optimizer_bytes = NVME_OPTIMIZER_BYTES * s.trainable / s.nodes
        seconds += optimizer_bytes * (1 / hw.nvme_read_gbps + 1 / hw.nvme_write_gbps) / 1e9
    if s.param_offload == "nvme":
        seconds += s.width * node_params * (2 * accumulation / hw.nvme_read_gbps + 1 / hw.nvme_write_gbps) / 1e9
    return seconds


def zero_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """ZeRO's gradient handling beyond its collectives (see the module docstring)."""
    if s.stage == 0:
        return 0.0
    passes = 1 if s.stage == 1 else accumulation  # stage 1 reduces only at the accumulation boundary
    rate = hw.zero3_ns_per_param if s.stage == 3 else hw.zero2_ns_per_param
    modules = accumulation * gathered_modules(s) * (hw.zero3_us_per_module or 0) * 1e-6 if s.stage == 3 else 0.0
    return passes * s.trainable * rate * 1e-9 + modules


def matmul_params(s: Setup) -> int:
    """Parameters a token multiplies through (see flops_per_token)."""
    return s.counts.active + s.adapters.total - (0 if s.arch.tie_word_embeddings else s.counts.embedding)


def gather_seconds(s: Setup, hw: Hardware) -> float:
    """One all-gather of the whole 16-bit model over the ranks (a ring moves (N-1)/N of it)."""
    bandwidth = hw.intra_node_gbps if s.nodes == 1 else hw.inter_node_gbps
    return (s.world - 1) / s.world * s.width * s.total_params / (bandwidth * 1e9)


def reference_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """The no-grad forwards per step (trainers.reference_forwards), each gathering the model under ZeRO-3."""
    forwards = trainers.reference_forwards(s)
    if not forwards:
        return 0.0
    a = s.arch
    per_token = 2 * matmul_params(s) + 4 * a.num_hidden_layers * s.seq_len * a.num_attention_heads * a.head_dim
    seconds = s.tokens * per_token / (hw.peak_tflops * 1e12 * hw.efficiency)
    return accumulation * forwards * (seconds + (gather_seconds(s, hw) if s.stage == 3 else 0.0))


def generation_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """GRPO's and RLOO's generation per optimizer step (module docstring)."""
    if s.trainer not in trainers.GENERATING:
        return 0.0
    seqs, matmul, flops = trainers.generation_sequences(s), matmul_params(s), hw.peak_tflops * 1e12 * hw.efficiency
    prompt = s.seq_len - s.completion_len
    kv = trainers.generation_items(s)["kv_cache"]
    prefill = 2 * matmul * seqs * prompt / flops
    decode_step = max(2 * matmul * seqs / flops, (s.width * s.total_params + kv / 2) / (hw.hbm_gbps * 1e9))
    seconds = prefill + s.completion_len * decode_step
    if s.stage == 3 and s.ds3_gather:
        seconds += gather_seconds(s, hw)
    elif s.stage == 3:  # each forward (prefill and every decode step) gathers module by module
        per_forward = gather_seconds(s, hw) + gathered_modules(s) * (hw.zero3_us_per_module or 0) * 1e-6
        seconds += (s.completion_len + 1) * per_forward
    generations = s.micro_batch * accumulation / seqs  # generation batches per optimizer step (1 by default)
    return generations * seconds


def tensor_parallel_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """tp=autotp's all-reduces (plan/tensor_parallel.py), none hidden: each layer waits for them."""
    gbps = hw.intra_node_gbps if s.tp_size <= s.gpus_per_node else hw.inter_node_gbps
    return accumulation * allreduce_seconds(s.arch, s.tp_size, s.tokens, s.width, s.gradient_checkpointing, gbps,
                                            hw.collective_latency_us or 0.0)


def sequence_parallel_seconds(s: Setup, hw: Hardware, accumulation: int) -> float:
    """sp=ulysses's all-to-alls (trl_ds/plan/sequence_parallel.py), within a node unless the group spans nodes."""
    gbps = hw.intra_node_gbps if s.sp_size <= s.gpus_per_node else hw.inter_node_gbps
    return accumulation * all_to_all_seconds(s.arch, s.sp_size, s.tokens, s.width, s.gradient_checkpointing, gbps,
                                             hw.collective_latency_us or 0.0)


def step_time(s: Setup, hw: Hardware, accumulation: int = 1) -> StepTime:
    compute = compute_seconds(s, hw, accumulation)
    terms = {"compute": compute, "communication": communication_seconds(s, hw, accumulation, compute)
             + tensor_parallel_seconds(s, hw, accumulation) + sequence_parallel_seconds(s, hw, accumulation),
             "optimizer": optimizer_seconds(s, hw), "offload": offload_seconds(s, hw, accumulation),
             "zero": zero_seconds(s, hw, accumulation), "overhead": accumulation * hw.micro_step_overhead_ms * 1e-3,
             "reference": reference_seconds(s, hw, accumulation),
             "generation": generation_seconds(s, hw, accumulation)}
    return StepTime(terms=terms, samples=s.micro_batch * s.data_parallel * accumulation)


def accumulation_for(s: Setup, global_size: Optional[int], configured: Optional[int]) -> int:
    """Micro-steps per optimizer step: from a fixed global batch, else the configured accumulation (or 1)."""
    if global_size:
        return max(global_size // (s.micro_batch * s.data_parallel), 1)
    return configured or 1


def time_rows(rows, hw: Hardware, global_size: Optional[int], configured: Optional[int]) -> Dict[Setup, StepTime]:
    """Each planner row's step time, keyed by its Setup."""
    return {e.setup: step_time(e.setup, hw, accumulation_for(e.setup, global_size, configured)) for e in rows}
