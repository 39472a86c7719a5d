"""Memory of one training configuration, before launch: bytes per rank on the device, per node on the host and NVMe.

- `device`: the PEAK per rank during a step. All terms but `overhead` are torch.cuda.max_memory_allocated's peak
  (`Estimate.allocated`): resident model states and buffers plus the larger of the two moments a step peaks at, the
  start of backward and the optimizer step (trl_ds/plan/moments.py). `overhead` adds the allocator's cache and the
  CUDA context (what nvidia-smi shows); on a CPU cluster it is the rank process's share of host RAM.
- `host`: the PEAK per node in host RAM over loading and training (× DeepSpeed's 1.5 pinned-buffer factor).
- `nvme`: bytes per node in the NVMe swap files (ZeRO-Infinity).
- `after_step`: what the engine holds per rank right after an optimizer step, by place (trl_ds/worker/measure.py).

Model states equal DeepSpeed's `estimate_zero2/3_model_states_mem_needs` where those apply; stages 0-1, fp32 and
NVMe follow the ZeRO papers. What its estimators leave out is under `buffers` (`buffer_items`). MoE counts every
expert's states, and the routed experts' activations; LoRA counts frozen and trainable parameters apart; Ulysses
divides the sequence-dependent terms by sp.size; bitsandbytes' quantized bases (trl_ds/plan/quantized.py) and the
TRL trainers' extra terms (trl_ds/plan/trainers.py) have their own.
"""
from dataclasses import dataclass, field, replace
from typing import Dict

from trl_ds.config.quantization import quant_storage, quantized_bits
from trl_ds.config.topology import Topology, topology
from trl_ds.config.values import checkpointing, dtype, micro_batch, offloads, value
from trl_ds.errors import ConfigError
from trl_ds.plan import quantized, trainers
from trl_ds.plan.moments import full_logits_peak, step_transient
from trl_ds.plan.optimizer_places import PLACE, off_device, optimizer_places
from trl_ds.plan.params import (
    AdapterCounts,
    Architecture,
    ParamCounts,
    architecture,
    count_classifier,
    count_lora,
    count_params,
    linear_shapes,
)
from trl_ds.plan.saved_activations import decoder_bytes
from trl_ds.plan.tensor_parallel import local_architecture

GiB, MiB = 2 ** 30, 2 ** 20
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor, applied to host model states only
LOAD_BYTES_PER_PARAM = 4  # without zero.Init every rank materialises the model in fp32 (DeepSpeed's assumption)
CUDA_CONTEXT_BYTES = 1 * GiB  # CUDA context, NCCL buffers, kernels: outside torch's allocator, shown by nvidia-smi
FRAGMENTATION = 0.25  # the caching allocator's reserved bytes above allocated (docs/gpu.md)
CPU_RANK_BYTES = int(0.55 * GiB)  # peak RSS of one CPU rank process
HOST_BYTES_PER_GPU_RANK = 2 * GiB  # host RSS of one GPU rank process (Python, torch, CUDA libraries)

# TRL's fused LM head (SFTTrainer): tiles of HEAD_TOKEN_TILE × HEAD_VOCAB_TILE logits, fp32 gradient accumulation.
HEAD_TOKEN_TILE, HEAD_VOCAB_TILE = 4096, 32768  # trl/kernels/chunked_logprob.py, trl.trainer.utils
HEAD_PEAK = {2: {"vocab_x_hidden": 6, "tokens_x_hidden": 6, "tokens": 24},
             4: {"vocab_x_hidden": 8, "tokens_x_hidden": 8, "tokens": 24}}
HEAD_CPU_TILE_TEMPORARIES = 29  # bytes per tile element of the torch fallback on CPU; Triton works in place
HEAD_WEIGHT_GRAD = 4  # per vocab × hidden: the fp32 lm_head gradient, which a frozen lm_head (LoRA) never allocates

# LoRA (adapters in the training dtype, as DeepSpeed casts every parameter): a frozen layer saves no weight-grad inputs
LORA_FROZEN_LAYER_SAVED = {2: {"h": 8, "f": 6, "q": 4, "kv": 4, "heads": 4, "one": 8},
                           4: {"h": 8, "f": 12, "q": 8, "kv": 8, "heads": 4, "one": 8}}
# Each targeted Linear(in, out) adds, in the training dtype, lora_A's input (in) and lora_A's output (r, for lora_B).
# With dropout lora_A's input is the dropout's own output, plus its mask: additive per target. Without dropout it
# is the Linear's input itself, saved once per distinct tensor: q/k/v share theirs, gate/up theirs, and o_proj's
# (the attention output) is already held by SDPA (None).
LORA_INPUTS = {"q_proj": "attention_in", "k_proj": "attention_in", "v_proj": "attention_in", "o_proj": None,
               "gate_proj": "mlp_in", "up_proj": "mlp_in", "down_proj": "down_in"}
STORAGE_WIDTH = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1}  # peft.bnb_4bit_quant_storage
CUDA_DROPOUT_MASK_BYTES = 1  # native_dropout's bool mask; CPU's dropout keeps a noise tensor of the dtype (measured)


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
    max_live_parameters: int = 1_000_000_000  # ZeRO-3: gathered parameters kept on a rank (stage3_max_live_parameters)
    persistence_threshold: int = 100_000
    sub_group_size: int = 1_000_000_000
    buffer_count: int = 5
    buffer_size: int = 100_000_000
    zeropp: bool = False  # ZeRO++ hpZ keeps a secondary 16-bit parameter partition per node
    lora_r: int = 0  # 0: every parameter trains; else LoRA's rank, and only the adapters train
    lora_targets: tuple = ()  # the Linear names LoRA adapts (q_proj, ..., down_proj)
    lora_dropout: float = 0.0
    sp_size: int = 1  # ranks sharing one sequence (Ulysses)
    tp_size: int = 1  # ranks splitting each layer (AutoTP): arch and counts are one rank's (plan/tensor_parallel.py)
    loaded_params: int = 0  # tp=autotp: the whole model's, which every rank loads before AutoTP splits it
    # The TRL trainer (trl_ds/plan/trainers.py). seq_len is a whole sequence: GRPO's and RLOO's prompt + completion.
    trainer: str = "sft"
    reference_wanted: bool = False  # DPO, KTO, or GRPO / RLOO with beta != 0: the loss needs reference log-probs
    precompute_ref: bool = False  # DPO's and KTO's precompute_ref_log_probs: computed once, no reference kept
    kl_sequence: bool = False  # KTO (loss_type other than apo_zero_unpaired): a KL sequence per example, no gradients
    completion_len: int = 0  # GRPO, RLOO: max_completion_length
    num_generations: int = 1  # GRPO, RLOO: completions per prompt
    ds3_gather: bool = True  # GRPO, RLOO: ds3_gather_for_generation
    generation_batch: int = 0  # GRPO, RLOO: sequences generated at once across data-parallel ranks (0: micro × accum.)
    accumulation: int = 1  # micro-steps per optimizer step as configured (GRPO's default steps_per_generation)
    # DeepSpeed's bf16 options and partial offload (trl_ds/plan/optimizer_places.py): bytes per parameter and place
    bf16_master: bool = False  # precision.bf16_master_weights_and_grads
    bf16_states: bool = False  # precision.bf16_optimizer_states
    offload_ratio: float = 1.0  # offload.ratio: applies at ZeRO-3 with the optimizer on the CPU
    # A base quantized by bitsandbytes (trl_ds/plan/quantized.py): 4 or 8 bits per decoder-layer Linear weight, 0: none
    quant_bits: int = 0
    double_quant: bool = False  # peft.bnb_4bit_use_double_quant
    storage_width: int = 1  # bytes of peft.bnb_4bit_quant_storage's dtype (ZeRO-3's persistence counts its elements)
    # The loss: "fused", TRL's chunked LM head (its trainers); "full", a model's own loss over the whole logits
    # (transformers' ForCausalLMLoss, a script's cross_entropy): trl_ds/plan/moments.py
    head: str = "fused"

    @property
    def topology(self) -> Topology:
        return Topology(nodes=self.nodes, gpus_per_node=self.gpus_per_node, sp_size=self.sp_size,
                        tp_size=self.tp_size)

    @property
    def world(self) -> int:
        """Ranks ZeRO partitions over: tensor-parallel ranks hold different weights, so world / tp.size."""
        return self.topology.world // self.tp_size

    @property
    def data_parallel(self) -> int:
        """Ranks reading different samples: sequence-parallel ranks share one."""
        return self.topology.data_parallel

    @property
    def width(self) -> int:
        """Bytes of a parameter (and its gradient) in the training dtype."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def uses_lora(self) -> bool:
        return self.lora_r > 0

    @property
    def adapters(self) -> AdapterCounts:
        return count_lora(self.arch, self.lora_r, self.lora_targets if self.uses_lora else ())

    @property
    def quantized(self) -> int:
        """Elements of the Linear weights bitsandbytes holds quantized (0 without quantization)."""
        return quantized.quantized_elements(self.arch) if self.quant_bits else 0

    @property
    def train_width(self) -> int:
        """Bytes of a trainable parameter: over a quantized base TRL casts LoRA's adapters to bf16 (its sft, dpo,
        reward and grpo trainers: `param.data.to(torch.bfloat16)`); DeepSpeed's gradient buffers keep its dtype."""
        return 2 if self.quant_bits else self.width

    @property
    def param_bytes(self) -> int:
        """Every parameter, whole: the base in the training dtype (its quantized weights packed) and the adapters."""
        packed = quantized.weight_bytes(self.quantized, self.quant_bits) if self.quant_bits else 0
        return self.width * (self.counts.total - self.quantized) + packed + self.train_width * self.adapters.total

    @property
    def quant_constants(self) -> int:
        """bitsandbytes' per-block scales and codes: no parameters, so whole on every rank at every stage."""
        return quantized.constants_bytes(self.arch, self.quant_bits, self.double_quant) if self.quant_bits else 0

    @property
    def persistent_bytes(self) -> int:
        """What ZeRO-3 keeps whole on every rank: the parameters below stage3_param_persistence_threshold (counted in
        their storage dtype's elements, as DeepSpeed's ds_numel counts a packed weight)."""
        t = self.persistence_threshold
        if not self.quant_bits:
            return self.width * self.persistent_params
        shapes = [i * o for i, o in quantized.quantized_shapes(self.arch)]
        unpacked_small = sum(n for n in shapes if n < t)  # counts.persistent counted them at full size
        packed_small = sum(quantized.weight_bytes(n, self.quant_bits) for n in shapes
                           if quantized.packed_elements(n, self.quant_bits, self.storage_width) < t)
        return (self.width * (self.counts.persistent(t) - unpacked_small) + packed_small
                + self.train_width * self.adapters.persistent(t))

    @property
    def total_params(self) -> int:
        """Every parameter the engine holds: the base model and LoRA's adapters."""
        return self.counts.total + self.adapters.total

    @property
    def trainable(self) -> int:
        """Ψ_t, the parameters with gradients and optimizer state."""
        return self.adapters.total if self.uses_lora else self.counts.total

    @property
    def largest_trainable(self) -> int:
        """ZeRO-3 holds one gathered module's gradient whole: the largest that has one."""
        return self.adapters.largest if self.uses_lora else self.counts.largest_module

    @property
    def tokens(self) -> int:
        """Tokens per rank per micro-step: sequence parallelism splits each sequence over sp_size ranks."""
        return self.micro_batch * trainers.sequences_per_sample(self.trainer) * self.seq_len // self.sp_size

    @property
    def persistent_params(self) -> int:
        """Parameters ZeRO-3 keeps whole on every rank, adapters included."""
        threshold = self.persistence_threshold
        return self.counts.persistent(threshold) + self.adapters.persistent(threshold)

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
    generation_items: Dict[str, int] = field(default_factory=dict)  # per rank, GRPO's / RLOO's generation by name
    verdict: str = ""

    @property
    def reference_after_step(self) -> Dict[str, int]:
        """The reference engine's parameters per rank by place, apart from the policy's states."""
        return trainers.reference_places(self.setup)

    @property
    def device_total(self) -> int:
        """What nvidia-smi shows per rank: the allocated peak, the allocator's cache and the CUDA context."""
        return sum(self.device.values())

    @property
    def allocated(self) -> int:
        """The per-rank peak of torch.cuda.max_memory_allocated: every device term but `overhead`."""
        return self.device_total - self.device.get("overhead", 0)

    @property
    def host_total(self) -> int:
        """Per node; on a CPU cluster the ranks' own bytes live in host RAM too."""
        ranks = self.device_total * self.setup.gpus_per_node if self.setup.judged_on_host else 0
        return sum(self.host.values()) + ranks

    def model_states(self) -> int:
        return sum(self.device[k] for k in ("params", "gradients", "optimizer"))


def setup_from_config(cfg) -> Setup:
    """The composed RunConfig's memory-relevant values (reads model.config_path when it is set). A micro-batch or
    checkpointing left `auto` reads as 1 and off: the planner and trl_ds.plan.autofit vary them from there."""
    arch, topo = architecture(cfg.model), topology(cfg)
    whole, arch = arch, local_architecture(arch, topo.tp_size)  # tp=autotp: one rank's layers (norms etc. whole)
    z, o, c, where, lora = cfg.zero, cfg.offload, cfg.cluster, offloads(cfg), value(cfg.peft.name) != "none"
    counts = count_classifier(arch) if value(cfg.trainer.name) == "reward" else count_params(arch)
    base = Setup(arch=arch, counts=counts, stage=z.stage, optimizer_offload=where["optimizer"],
                 param_offload=where["param"], nodes=topo.nodes, gpus_per_node=topo.gpus_per_node,
                 device=value(c.device), dtype=dtype(cfg), micro_batch=micro_batch(cfg) or 1,
                 seq_len=cfg.trainer.max_length, gradient_checkpointing=bool(checkpointing(cfg)),
                 gpu_memory_gb=c.gpu_memory_gb, cpu_memory_gb=c.cpu_memory_gb,
                 reduce_bucket_size=z.reduce_bucket_size, overlap_comm=z.overlap_comm,
                 prefetch_bucket_size=z.stage3_prefetch_bucket_size, max_live_parameters=z.stage3_max_live_parameters,
                 persistence_threshold=z.stage3_param_persistence_threshold, sub_group_size=z.sub_group_size,
                 buffer_count=o.buffer_count, buffer_size=o.buffer_size, zeropp=bool(z.get("zeropp", False)),
                 lora_r=cfg.peft.r if lora else 0, lora_targets=tuple(cfg.peft.target_modules) if lora else (),
                 lora_dropout=cfg.peft.lora_dropout if lora else 0.0, sp_size=topo.sp_size,
                 bf16_master=bool(cfg.precision.bf16_master_weights_and_grads),
                 bf16_states=bool(cfg.precision.bf16_optimizer_states), offload_ratio=float(cfg.offload.ratio),
                 **quantization_fields(cfg))
    loaded = count_params(whole).total if topo.tp_size > 1 else 0
    return replace(base, tp_size=topo.tp_size, loaded_params=loaded, **trainer_fields(cfg, topo))


def quantization_fields(cfg) -> dict:
    """peft=qlora / peft.load_in_8bit: the bits, double quantization and the storage dtype's width."""
    bits = quantized_bits(cfg)
    return {"quant_bits": bits, "double_quant": bits == 4 and bool(cfg.peft.bnb_4bit_use_double_quant),
            "storage_width": STORAGE_WIDTH[quant_storage(cfg)] if bits == 4 else 1}


def trainer_fields(cfg, topo: Topology) -> dict:
    """The trainer's own settings (TRL's names; + trainer.args passthroughs such as precompute_ref_log_probs)."""
    t, name = cfg.trainer, value(cfg.trainer.name)
    args = t.get("args") or {}
    generating = name in trainers.GENERATING
    fields = {"trainer": name, "reference_wanted": name in ("dpo", "kto") or (generating and t.beta != 0),
              "precompute_ref": name in trainers.PRECOMPUTABLE and bool(args.get("precompute_ref_log_probs", False)),
              "kl_sequence": name == "kto" and args.get("loss_type", "kto") != trainers.KTO_NO_KL,
              "accumulation": t.gradient_accumulation_steps or 1}
    if generating:
        config = f"{name.upper()}Config"
        steps = _count_or_none(args, "steps_per_generation", config)
        generation = _count_or_none(args, "generation_batch_size", config) or (
            (micro_batch(cfg) or 1) * steps * topo.data_parallel if steps else cfg.batch.global_size or 0)
        fields.update(seq_len=t.max_length + t.max_completion_length, completion_len=t.max_completion_length,
                      num_generations=t.num_generations, generation_batch=generation,
                      ds3_gather=bool(args.get("ds3_gather_for_generation", True)))
    return fields


def _count_or_none(args, key: str, config: str):
    """A GRPOConfig / RLOOConfig count given in trainer.args: a positive integer, or None (left out: TRL derives it)."""
    given = args.get(key)
    if given is None or (isinstance(given, int) and not isinstance(given, bool) and given > 0):
        return given
    raise ConfigError([f"trainer.args.{key}={given} must be a positive integer ({config}.{key}). Set e.g. "
                       f"trainer.args.{key}=4, or leave it out for TRL to derive it."])


def estimate(s: Setup) -> Estimate:
    states, host_states = model_states(s)
    items = device_buffers(s)
    transients = {"activations": activations(s), "logits": logits(s)}
    # the step's gradient copy where it exceeds what only the start of backward holds (the peak is the larger moment)
    backward_only = sum(transients.values()) + items.get("live_params", 0)
    states["gradients"] += max(0, step_transient(s) - backward_only)
    device = {**states, **transients, "buffers": sum(items.values()), "reference": trainers.reference_peak(s),
              "generation": trainers.generation_excess(s, sum(transients.values()))}
    device["overhead"] = overhead(s, sum(device.values()))
    device["quantized_load"] = quantized_load_excess(s, sum(device.values()))
    reference_off_device = trainers.reference_places(s).get("host", 0)  # ZeRO-3 with offload.param=cpu
    host = {"model_states": host_model_states(s, host_states + reference_off_device), "buffers": host_buffers(s),
            "processes": s.gpus_per_node * (0 if s.judged_on_host else HOST_BYTES_PER_GPU_RANK)}
    result = Estimate(setup=s, device=device, host=host, nvme=nvme_bytes(s), after_step=after_step(s),
                      buffer_items=items, generation_items=trainers.generation_items(s))
    result.verdict = verdict(result)
    return result


def quantized_load_excess(s: Setup, training: int) -> int:
    """transformers loads a quantized model without zero.Init, so under ZeRO-3 every rank holds the whole quantized
    model until the engine partitions it: a peak above the training step's when the model is the larger."""
    if not s.quant_bits or s.stage != 3:
        return 0
    fixed = CPU_RANK_BYTES if s.device == "cpu" else CUDA_CONTEXT_BYTES
    return max(s.param_bytes + s.quant_constants + fixed - training, 0)


def model_states(s: Setup):
    """Peak per-rank model states on the device, and the per-rank bytes DeepSpeed keeps off it (cpu or nvme).

    2 B params + 2 B grads + optimizer_places' bytes per parameter, partitioned by stage (ZeRO paper); ZeRO-3 adds the
    largest module gathered with its gradient. The fp32 gradient partition exists only during the step
    (moments.step_transient) unless an offload keeps it. Parameters count Ψ, gradients and optimizer states Ψ_t.
    """
    psi_t, n, w, l_max = s.trainable, s.world, s.width, s.counts.largest_module
    offload_opt, params_whole = s.optimizer_offload != "none", s.param_bytes + s.quant_constants
    if s.stage == 0:  # mixed precision: fp32 master copy and a transient fp32 gradient; fp32 steps the params
        master = 0 if s.dtype == "fp32" else 4
        return {"params": params_whole, "gradients": (w + master) * psi_t, "optimizer": (master + 8) * psi_t}, 0
    places = optimizer_places(s)
    optimizer = places["states"]["device"]
    # without an offload the fp32 gradients exist only during the step (moments.step_transient); a partial offload's
    # device sub-groups keep theirs (stage3.py `_release_sub_group` frees them only without offload)
    fp32_grads = places["master_grads"]["device"] if s.optimizer_offload != "none" else 0
    off_device_bytes = off_device(places)  # fp32 gradients, master weights, Adam moments
    if s.stage < 3:
        grads16 = w * psi_t if s.stage == 1 else (0 if offload_opt else int(w * psi_t / n))
        return {"params": params_whole, "gradients": grads16 + fp32_grads, "optimizer": optimizer}, off_device_bytes
    params_offloaded = s.param_offload != "none"
    params = w * l_max + s.quant_constants + (0 if params_offloaded else int(s.param_bytes / n))
    off_device_bytes += int(s.param_bytes / n) if params_offloaded else 0
    gradients = w * s.largest_trainable + fp32_grads
    return {"params": params, "gradients": gradients, "optimizer": optimizer}, off_device_bytes


def host_model_states(s: Setup, per_rank_host: int) -> int:
    """Per node, × DeepSpeed's 1.5, with its zero.Init convention: stages 0-2 load the whole model in fp32 on every
    rank first (the larger of that and the offloaded states counts); ZeRO-3 loads one module at a time, so only the
    offloaded states count once there are any; a quantized base loads one tensor at a time at every stage.
    NVMe-offloaded states are on disk, not here."""
    on_cpu = per_rank_host * s.gpus_per_node if "nvme" not in (s.optimizer_offload, s.param_offload) else 0
    if s.judged_on_host:  # CPU ranks: exact bytes, no pinned buffers; the ranks' own training RAM dominates loading
        return on_cpu
    if s.quant_bits:
        peak = max(quantized_load_host(s), on_cpu)
    elif s.stage == 3:
        peak = on_cpu or LOAD_BYTES_PER_PARAM * s.counts.largest_module * s.gpus_per_node
    else:
        # the reference model (below ZeRO-3) is loaded in the policy's dtype while the policy is still on the host
        reference = trainers.reference_resident(s) * s.gpus_per_node
        loaded = max(s.total_params, s.loaded_params)
        peak = max(LOAD_BYTES_PER_PARAM * loaded * s.gpus_per_node + reference, on_cpu)
    return int(peak * HOST_BUFFER_FACTOR)


def quantized_load_host(s: Setup) -> int:
    """Per node, a base bitsandbytes quantizes at load, at every stage: transformers reads the checkpoint one tensor
    at a time and quantizes each on the GPU, so at most the largest module's is in host RAM per rank."""
    return LOAD_BYTES_PER_PARAM * s.counts.largest_module * s.gpus_per_node


def nvme_bytes(s: Setup) -> int:
    """ZeRO-Infinity swap files per node: 16-bit params and/or optimizer_places' NVMe states."""
    params = s.param_bytes if s.param_offload == "nvme" else 0
    optimizer = optimizer_places(s)["states"].get("nvme", 0) * s.world  # per rank, so × the ranks
    reference = trainers.reference_places(s).get("nvme", 0) * s.gpus_per_node  # per rank, in its own swap files
    return int(params / s.nodes + optimizer / s.nodes) + reference


def layer_saved(arch: Architecture, c: Dict[str, int]) -> int:
    """Bytes per token of one layer for Llama-form coefficients `c` (LoRA: LORA_FROZEN_LAYER_SAVED)."""
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    return (c["h"] * arch.hidden_size + c["f"] * arch.intermediate_size + c["q"] * q + c["kv"] * kv
            + c["heads"] * arch.num_attention_heads + c["one"])


def lora_layer_saved_per_token(s: Setup) -> int:
    """A frozen layer with LoRA's adapters on s.lora_targets (see LORA_INPUTS)."""
    w, fan_in = s.width, {name: shape[0] for name, shape in linear_shapes(s.arch).items()}
    lora_a_outputs = w * s.lora_r * len(s.lora_targets)
    if s.lora_dropout > 0:
        mask = w if s.device == "cpu" else CUDA_DROPOUT_MASK_BYTES
        inputs = (w + mask) * sum(fan_in[t] for t in s.lora_targets)
    else:
        distinct = {LORA_INPUTS[t]: fan_in[t] for t in s.lora_targets if LORA_INPUTS[t]}
        inputs = w * sum(distinct.values())
    return layer_saved(s.arch, LORA_FROZEN_LAYER_SAVED[w]) + inputs + lora_a_outputs


def activations(s: Setup) -> int:
    """Saved activations of all layers at the start of backward (SDPA without padding: no a·s² term). With
    checkpointing each layer keeps only its input, and one layer is recomputed at a time (measured: LoRA too).
    LoRA charges every layer what the last one saves: without checkpointing the first saves a little less, as its
    input needs no gradient."""
    layers = s.arch.num_hidden_layers
    if s.uses_lora:
        per_token = lora_layer_saved_per_token(s)
        largest, all_layers = per_token * s.tokens, layers * per_token * s.tokens
    else:
        largest, all_layers = decoder_bytes(s.arch, s.width, s.tokens, s.seq_len)
    if s.gradient_checkpointing:
        return layers * s.width * s.arch.hidden_size * s.tokens + largest + dequantized_weight(s)
    return all_layers + dequantized_weight(s)


def dequantized_weight(s: Setup) -> int:
    """The largest quantized weight, dequantized into the compute dtype one at a time."""
    if not s.quant_bits:
        return 0
    return s.width * max(i * o for i, o in quantized.quantized_shapes(s.arch))


def logits(s: Setup) -> int:
    """Peak of TRL's fused LM head + loss (the full logits never exist); the reward model has no vocabulary head."""
    if s.trainer == "reward":
        return trainers.reward_head_peak(s)
    if s.head == "full":
        return full_logits_peak(trainers.head_tokens(s), s.arch.vocab_size, s.width)
    return fused_head_peak(trainers.head_tokens(s), s.arch.vocab_size, s.arch.hidden_size, s.width,
                           on_cpu=s.device == "cpu", frozen=s.uses_lora)


def fused_head_peak(tokens: int, vocab: int, hidden: int, width: int, on_cpu: bool, frozen: bool = False) -> int:
    """One logits tile, fp32 lm_head (unless frozen) and hidden-state gradients, per-token statistics."""
    c = HEAD_PEAK[width]
    tile_tokens = min(tokens, HEAD_TOKEN_TILE)
    tile = tile_tokens * HEAD_VOCAB_TILE * width
    if on_cpu:
        tile += HEAD_CPU_TILE_TEMPORARIES * tile_tokens * min(vocab, HEAD_VOCAB_TILE)
    vocab_x_hidden = c["vocab_x_hidden"] - (HEAD_WEIGHT_GRAD if frozen else 0)
    return (tile + vocab_x_hidden * vocab * hidden + c["tokens_x_hidden"] * tokens * hidden
            + c["tokens"] * tokens)


def device_buffers(s: Setup) -> Dict[str, int]:
    """Per-rank device bytes DeepSpeed's estimators leave out, by name (gradient buffers hold trainable ones only).

    ZeRO-3's live_params: gathered parameters stay beside their partitions, up to stage3_max_live_parameters, until
    their next use is beyond stage3_max_reuse_distance (partitioned_param_coordinator.py __params_to_release)."""
    psi_t, w, n = s.trainable, s.width, s.world
    if s.stage == 0:
        return {}
    copies = 2 if s.overlap_comm and s.stage < 3 else 1  # stages 1-2 double-buffer the reduce bucket
    items = {"reduce_bucket": copies * w * min(s.reduce_bucket_size, psi_t)}
    if s.stage == 3:
        live = min(w * s.max_live_parameters, s.param_bytes - s.persistent_bytes)
        items["live_params"] = max(live - w * s.counts.largest_module, 0)
        items["persistent_params"] = s.persistent_bytes
        if s.optimizer_offload == "none":
            items["grad_partition_16bit"] = int(w * psi_t / n)
        if s.zeropp:
            items["hpz_secondary_params"] = int(s.param_bytes / s.gpus_per_node)
    return items


def host_buffers(s: Setup) -> int:
    """Pinned host bytes per node: ZeRO-3's offloaded gradient partition and the NVMe swap buffers."""
    psi_t, n = s.trainable, s.world
    per_rank = 0
    if s.stage == 3 and s.optimizer_offload != "none":
        per_rank += int(s.width * psi_t / n)
    if s.param_offload == "nvme":
        per_rank += s.buffer_count * s.buffer_size * s.width
    if s.optimizer_offload == "nvme":
        per_rank += 4 * min(int(psi_t / n), s.sub_group_size) * 4
    return per_rank * s.gpus_per_node


def overhead(s: Setup, allocated: int) -> int:
    """GPU: CUDA context + allocator fragmentation. CPU: the rank process itself (interpreter, torch, DeepSpeed)."""
    if s.device == "cpu":
        return CPU_RANK_BYTES
    return CUDA_CONTEXT_BYTES + int(FRAGMENTATION * allocated)


def after_step(s: Setup) -> Dict[str, Dict[str, int]]:
    """Bytes the engine's tensors hold per rank after an optimizer step, by kind and place (device|host|nvme):
    params (partitions and ZeRO-3's persistent ones), kept gradient partitions, optimizer_places' states."""
    psi_t, n, w = s.trainable, s.world, s.width
    opt_place, param_place = PLACE[s.optimizer_offload], PLACE[s.param_offload]
    grad_place = "device" if s.optimizer_offload == "none" else "host"
    if s.stage == 0:
        master = 0 if s.dtype == "fp32" else 4 * psi_t
        return {"params": {"device": s.param_bytes + s.quant_constants}, "gradients": {},
                "optimizer": {"device": master + 8 * psi_t}}
    places = optimizer_places(s)
    optimizer = {place: b for place, b in places["states"].items() if b or place == opt_place}
    # without an offload the fp32 gradients are freed after the step; offloaded (and the device sub-groups of a
    # partial offload) DeepSpeed keeps them (stage3.py `_release_sub_group` frees them only without offload)
    kept_grads = {} if s.optimizer_offload == "none" else {p: b for p, b in places["master_grads"].items() if b}
    if s.stage < 3:
        return {"params": {"device": s.param_bytes + s.quant_constants}, "gradients": kept_grads,
                "optimizer": optimizer}
    params = {param_place: int(s.param_bytes / n)}
    params["device"] = params.get("device", 0) + s.persistent_bytes + s.quant_constants
    gradients = dict(kept_grads)
    gradients[grad_place] = gradients.get(grad_place, 0) + int(w * psi_t / n)  # ZeRO-3's 16-bit gradient partition
    return {"params": params, "gradients": gradients, "optimizer": optimizer}


def verdict(e: Estimate) -> str:
    s = e.setup
    if not s.judged_on_host and e.device_total > s.gpu_memory_gb * GiB:
        return "does not fit"
    if e.host_total > s.cpu_memory_gb * GiB:
        return "does not fit in host RAM"
    return "fits"
