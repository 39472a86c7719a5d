"""The planner: which ZeRO/offload/checkpointing/micro-batch configs fit, how fast, and which one to run.

No DeepSpeed, no weights, and no torch unless the family is counted on the meta device: bytes come from
trl_ds/plan/memory.py, seconds per step (the rows' order, fitting rows first) from trl_ds/plan/steptime.py. Which
rows the launch accepts is the check's answer, passed in as `accepts` (trl_ds/check/plan_rows.py).
"""
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from trl_ds.config.model_source import display_name, uses_preset
from trl_ds.config.schema import PeftConfig
from trl_ds.config.values import brings_files, elastic_min_nodes, value
from trl_ds.errors import ConfigError
from trl_ds.plan import trainers
from trl_ds.plan.dimensions import opt16_label
from trl_ds.plan.grid import OFFLOADS, micro_batches, offload_name, offload_overrides, setups, with_ratios
from trl_ds.plan.memory import Estimate, GiB, MiB, Setup, estimate
from trl_ds.plan.optimizer_places import bf16_allows, label, partial_ratio, ratio_overrides
from trl_ds.plan.params import describe_count, linear_shapes
from trl_ds.plan.saved_activations import measured
from trl_ds.plan.steptime import StepTime, hardware_from_config, time_rows

# name -> (offload.optimizer, offload.param), slowest last; the override that selects each
GRID_KEYS = ("zero=", "zero.stage=", "offload=", "offload.optimizer=", "offload.param=", "offload.ratio=",
             "trainer.gradient_checkpointing=", "trainer.per_device_train_batch_size=", "tp=", "tp.size=", "sp=",
             "sp.size=", "precision.bf16_master_weights_and_grads=", "precision.bf16_optimizer_states=",
             "precision.bf16_optimizer_auto=")
NOT_FOR_RUNNING = ("dry_run=", "preflight.")  # dropped from the recommended run command
COLUMNS = ("params", "gradients", "optimizer", "activations", "logits", "buffers", "overhead")
# The trainer's own columns (trl_ds/plan/trainers.py), shown for the trainers that can hold them; plan.json has all.
TRAINER_COLUMNS = {"dpo": ("reference",), "kto": ("reference",), "grpo": ("reference", "generation"),
                   "rloo": ("reference", "generation")}


def columns(s: Setup) -> Tuple[str, ...]:
    quantized = ("quantized_load",) if s.quant_bits else ()  # ZeRO-3's whole-model load peak (plan/memory.py)
    return COLUMNS[:-1] + TRAINER_COLUMNS.get(s.trainer, ()) + COLUMNS[-1:] + quantized


Accepts = Optional[Callable[[Setup], bool]]  # the launch's check of a row (trl_ds/check/plan_rows.py RowCheck)


def grid(base: Setup, global_size: Optional[int] = None, accepts: Accepts = None, ratios: bool = False
         ) -> List[Estimate]:
    """Every valid stage × offload × checkpointing × micro-batch around `base` (× the partial offload ratios with
    `ratios`, as offload=auto tries them), estimated: those DeepSpeed accepts with the bf16 options in force, and
    those `accepts`, the launch's check, accepts."""
    points = setups(base, micro_batches(base, global_size))
    return [estimate(s) for s in (with_ratios(points) if ratios else points)
            if bf16_allows(s) and (accepts is None or accepts(s))]


def speed_key(e: Estimate) -> Tuple:
    """Smaller is expected to be faster: offload traffic first, then recomputation, then ZeRO-3's parameter
    all-gathers, then a larger micro-batch; stages 0-2 move the same bytes, so the one with most headroom wins.
    Before all of them, fp32 master weights and moments: a 16-bit option that is not faster changes the numerics
    for nothing (the step-time model charges Adam the same bytes either way)."""
    s = e.setup
    return (s.bf16_master + s.bf16_states, list(OFFLOADS).index(offload_name(s)), s.gradient_checkpointing,
            s.stage == 3, -s.micro_batch, e.device_total)


Times = Dict[Setup, StepTime]  # each row's estimated step time (trl_ds/plan/steptime.py)


def recommend(rows: Sequence[Estimate], times: Optional[Times] = None) -> Optional[Estimate]:
    """The fitting row with the least estimated time per sample; the speed heuristic without times."""
    fitting = [e for e in rows if e.verdict == "fits"]
    key = (lambda e: (times[e.setup].per_sample, speed_key(e))) if times else speed_key
    return min(fitting, key=key) if fitting else None


def by_time(rows: Sequence[Estimate], times: Times) -> List[Estimate]:
    """Fitting rows first, each part fastest first (seconds per sample at the fixed global batch)."""
    return sorted(rows, key=lambda e: (e.verdict != "fits", times[e.setup].per_sample, speed_key(e)))


def times_for(cfg, rows: Sequence[Estimate]) -> Times:
    hw = hardware_from_config(cfg)
    return time_rows(rows, hw, cfg.batch.global_size, cfg.trainer.gradient_accumulation_steps)


def reason(best: Estimate, rows: Sequence[Estimate], times: Optional[Times] = None) -> str:
    if times:
        return time_reason(best, rows, times)
    s = best.setup
    offload = {"none": "no offload (nothing crosses PCIe each step)", "opt-cpu": "optimizer on CPU is the least "
               "offload that fits", "opt+param-cpu": "optimizer and parameters on CPU are needed to fit",
               "nvme": "only NVMe offload fits"}[offload_name(s)]
    parts = [offload, "activation checkpointing needed (+1 forward of recomputation)" if s.gradient_checkpointing
             else "no recomputation", "ZeRO-3 needed (parameter all-gathers: 1.5x the traffic)" if s.stage == 3
             else f"ZeRO-{s.stage} (no parameter all-gathers)", f"micro-batch {s.micro_batch}"]
    fitting = sum(e.verdict == "fits" for e in rows)
    return f"fastest of the {fitting} configurations that fit: " + ", ".join(parts)


def time_reason(best: Estimate, rows: Sequence[Estimate], times: Times) -> str:
    t = times[best.setup]
    terms = ", ".join(f"{k} {v:.3g}" for k, v in t.terms.items() if v > 0)
    fitting = sum(e.verdict == "fits" for e in rows)
    return (f"least estimated time per sample of the {fitting} configurations that fit: {t.seconds:.3g} s per step "
            f"of {t.samples} samples ({terms})")


def stage_override(stage: int, keyed: bool = False) -> str:
    """zero=stageN, or zero.stage=N where a file the user brings sets the stage (a key given by name wins over it,
    a group choice does not: check/imported.py given_by_name)."""
    return f"zero.stage={stage}" if keyed else f"zero=stage{stage}"


def grid_overrides(s: Setup, keyed: bool = False) -> List[str]:
    return [stage_override(s.stage, keyed), *offload_overrides(s, keyed), *ratio_overrides(s),
            f"trainer.gradient_checkpointing={str(s.gradient_checkpointing).lower()}",
            f"trainer.per_device_train_batch_size={s.micro_batch}", *split_overrides(s)]


def split_overrides(s: Setup) -> List[str]:
    """tp=autotp tp.size=N and sp=ulysses sp.size=N where a row splits layers or sequences, and the 16-bit options a
    row has on; none at size 1 or off (the defaults, which also replace a typed tp=auto, sp=auto or
    precision.bf16_optimizer_auto=true)."""
    opt16 = (["precision.bf16_master_weights_and_grads=true"] if s.bf16_master else []) + \
        (["precision.bf16_optimizer_states=true"] if s.bf16_states else [])
    return (["tp=autotp", f"tp.size={s.tp_size}"] if s.tp_size > 1 else []) + \
        (["sp=ulysses", f"sp.size={s.sp_size}"] if s.sp_size > 1 else []) + opt16


def run_command(s: Setup, user_overrides: Sequence[str]) -> str:
    """The user's overrides without those the grid point sets (a partial offload's sub-group size included); by key
    where they name a file the user brings, so the row's choices win over the file's."""
    ours = grid_overrides(s, brings_files(user_overrides))
    set_here = tuple(o.split("=", 1)[0] + "=" for o in ours)
    kept = [o for o in user_overrides if not o.lstrip("+").startswith(GRID_KEYS + NOT_FOR_RUNNING + set_here)]
    return " ".join(["python -m trl_ds", *kept, *ours])


def changed(a: Setup, b: Setup) -> int:
    return sum(x != y for x, y in [(a.stage, b.stage), (offload_name(a), offload_name(b)),
                                   (a.gradient_checkpointing, b.gradient_checkpointing),
                                   (a.micro_batch, b.micro_batch)])


def smallest_fitting_change(current: Setup, global_size: Optional[int] = None, accepts: Accepts = None
                            ) -> Optional[Estimate]:
    """The grid point that fits with the fewest changed choices, the fastest among equals."""
    fitting = [e for e in grid(current, global_size, accepts) if e.verdict == "fits"]
    return min(fitting, key=lambda e: (changed(current, e.setup), speed_key(e)), default=None)


def change_overrides(current: Setup, target: Setup, keyed: bool = False) -> List[str]:
    """The overrides that turn `current` into `target`, one group per changed choice; a partial offload that stops
    or starts applying is set too (the check refuses offload.ratio below 1 where it does not apply). keyed: by key,
    to win over a file the user brings."""
    out = [stage_override(target.stage, keyed)] if target.stage != current.stage else []
    out += offload_overrides(target, keyed) if offload_name(target) != offload_name(current) else []
    if partial_ratio(target) != partial_ratio(current):
        out += ratio_overrides(target) or ["offload.ratio=1"]
    if target.gradient_checkpointing != current.gradient_checkpointing:
        out.append(f"trainer.gradient_checkpointing={str(target.gradient_checkpointing).lower()}")
    if target.micro_batch != current.micro_batch:
        out.append(f"trainer.per_device_train_batch_size={target.micro_batch}")
    return out


def preflight_mode(cfg) -> str:
    mode = value(cfg.preflight.memory)
    if mode == "auto":
        return "error" if value(cfg.cluster.device) == "cuda" else "warn"
    return mode


def check_fit(cfg, current: Estimate, launching: bool, accepts: Accepts = None, keyed: bool = False
              ) -> Optional[str]:
    """None when the config fits (or preflight.memory=off); the warning text for warn and for dry runs (which only
    write files); ConfigError for error when launching. keyed: the advice by key (a file the user brings)."""
    mode = preflight_mode(cfg)
    if mode == "off" or current.verdict == "fits":
        return None
    message = not_fit_message(cfg, current, accepts, keyed)
    if mode == "error" and launching:
        raise ConfigError([message + " Or set preflight.memory=warn to launch anyway."])
    return message


def check_elastic_fit(cfg, full: Estimate, launching: bool) -> Optional[str]:
    """An elastic launch (launcher.min_nodes) may start on fewer nodes, where each rank holds larger ZeRO shards:
    the fewest nodes it may start with must fit too. Handled as check_fit handles the full cluster."""
    low, nodes = elastic_min_nodes(cfg), cfg.cluster.nodes
    if low is None or preflight_mode(cfg) == "off" or full.verdict != "fits":
        return None
    smallest = estimate(replace(full.setup, nodes=low))
    if smallest.verdict == "fits":
        return None
    fitting = next(n for n in range(low + 1, nodes + 1) if estimate(replace(full.setup, nodes=n)).verdict == "fits")
    fix = f"Set launcher.min_nodes={fitting}, the fewest nodes that fit." if fitting < nodes else \
        "Only every node fits: drop launcher.min_nodes."
    message = (f"launcher.min_nodes={low}: the run may start on {low} of cluster.nodes={nodes} nodes, where each "
               f"rank holds larger ZeRO shards: {overflow(smallest)} {fix}")
    if preflight_mode(cfg) == "error" and launching:
        raise ConfigError([message + " Or set preflight.memory=warn to launch anyway."])
    return message


def overflow(e: Estimate) -> str:
    """What exceeds which limit, for an estimate that does not fit."""
    s = e.setup
    parts = ", ".join(f"{k} {size(v)}" for k, v in e.device.items() if v or k in COLUMNS)
    if e.verdict == "does not fit":
        return f"estimated {size(e.device_total)} GiB per GPU ({parts}) > cluster.gpu_memory_gb={s.gpu_memory_gb:g}."
    return (f"estimated {size(e.host_total)} GiB of host RAM per node > cluster.cpu_memory_gb={s.cpu_memory_gb:g} "
            f"(per rank: {parts}).")


def not_fit_message(cfg, e: Estimate, accepts: Accepts = None, keyed: bool = False) -> str:
    s = e.setup
    what = overflow(e)
    head = f"{model_label(cfg.model)} does not fit on cluster={cfg.cluster.name} (ZeRO-{s.stage}, " \
           f"offload {offload_name(s)}, micro-batch {s.micro_batch}, {s.seq_len} tokens): {what}"
    head += trainer_terms(e)
    fix = trainer_fix(s)
    if fix is not None:
        overrides, fitted = fix
        return (head + f" Fits with {' '.join(overrides)} (estimated {size(fitted.device_total)} GiB per rank, "
                       f"{size(fitted.host_total)} GiB host per node).")
    best = smallest_fitting_change(s, cfg.batch.global_size, accepts)
    if best is None:
        return (head + " Nothing in the planner's grid fits either: add GPUs (cluster.nodes=...), shorten "
                       "sequences (trainer.max_length=...) or use larger devices." + qlora_hint(s, cfg, keyed))
    hint = qlora_hint(s, cfg, keyed) if best.setup.param_offload == "nvme" else ""  # only NVMe: the slowest way in
    return (head + f" The smallest change that fits: {' '.join(change_overrides(s, best.setup, keyed))} (estimated "
                   f"{size(best.device_total)} GiB per rank, {size(best.host_total)} GiB host per node).{hint}")


def qlora_hint(s: Setup, cfg, keyed: bool = False) -> str:
    """QLoRA changes what is trained, so it is never picked; said where it would fit and nothing else does."""
    lora = PeftConfig()
    targets = s.lora_targets or tuple(t for t in lora.target_modules if t in linear_shapes(s.arch))
    if s.quant_bits or s.arch.is_moe or not targets:  # fused projections (phi3's qkv_proj): no default targets
        return ""
    qlora = replace(s, quant_bits=4, double_quant=True, storage_width=s.width, lora_r=s.lora_r or lora.r,
                    lora_targets=targets, lora_dropout=lora.lora_dropout)
    fitted = estimate(qlora) if estimate(qlora).verdict == "fits" else smallest_fitting_change(
        qlora, cfg.batch.global_size)
    if fitted is None:
        return ""
    overrides = ["peft=qlora", *change_overrides(qlora, fitted.setup, keyed)]
    return (f" A 4-bit base with LoRA adapters would fit (it trains adapters over a frozen base): "
            f"{' '.join(overrides)} (estimated {size(fitted.device_total)} GiB per rank).")


def trainer_terms(e: Estimate) -> str:
    """What the trainer adds to SFT's bill, named, for a refusal (empty for SFT)."""
    s = e.setup
    labels = {"reference": "the reference model", "generation": "generation beyond training's activations"}
    parts = [f"{labels[k]} {size(e.device[k])} GiB" for k in TRAINER_COLUMNS.get(s.trainer, ()) if e.device[k]]
    if trainers.sequences_per_sample(s.trainer) > 1:
        parts.append(f"activations and logits for {trainers.sequences_per_sample(s.trainer)} sequences per sample "
                     f"(chosen + rejected)")
    return f" trainer={s.trainer} holds: {', '.join(parts)}." if parts else ""


def trainer_fix(s: Setup) -> Optional[Tuple[List[str], Estimate]]:
    """The first trainer setting (PEFT, precompute, beta 0, no ZeRO-3 gather) with which this config fits."""
    for overrides, changes in trainers.fixes(s):
        fitted = estimate(replace(s, **changes))
        if fitted.verdict == "fits":
            return overrides, fitted
    return None


def model_label(model_cfg) -> str:
    """The override that named the model, for messages."""
    if uses_preset(model_cfg):
        return f"model={model_cfg.name}"
    key = "config_path" if model_cfg.get("config_path") else "name_or_path"
    return f"model.{key}={model_cfg[key]}"


def plan_for_run_dir(cfg, current: Estimate, overrides: Sequence[str], accepts: Accepts = None) -> dict:
    """plan.json: the current config's estimate, the grid around it and the recommendation."""
    names = (cfg.cluster.name, display_name(cfg.model))
    rows = grid(current.setup, cfg.batch.global_size, accepts)
    times = times_for(cfg, rows + [current])
    return {**as_json(by_time(rows, times), current, names, overrides, times),
            "preflight": {"memory": preflight_mode(cfg), "verdict": current.verdict}}


def size(n: int, unit: int = GiB) -> str:
    """Bytes as a number of `unit` (GiB unless told), one decimal."""
    return f"{n / unit:.1f}"


def table_unit(rows: Sequence[Estimate]) -> Tuple[int, str]:
    """GiB, or MiB when every rank needs less than 1 GiB (CPU-sized models)."""
    return (GiB, "GiB") if max(e.device_total for e in rows) >= GiB else (MiB, "MiB")


VARIED = {"tp": lambda s: str(s.tp_size), "sp": lambda s: str(s.sp_size), "ratio": lambda s: f"{partial_ratio(s):g}",
          "bf16-opt": opt16_label}


def varied(rows: Sequence[Estimate]) -> Dict[str, Callable[[Setup], str]]:
    """The tp, sp, ratio and 16-bit option columns, each where the rows differ in it."""
    out = {name: shown for name, shown in VARIED.items() if len({shown(e.setup) for e in rows}) > 1}
    if len({partial_ratio(e.setup) for e in rows} - {1.0}) < 2:  # one typed ratio: shown as opt-cpu@0.5, as before
        out.pop("ratio", None)
    return out


def render_table(rows: Sequence[Estimate], times: Times) -> str:
    unit, shown, extra = table_unit(rows)[0], columns(rows[0].setup), varied(rows)
    offload = offload_name if "ratio" in extra else offload_shown  # the ratio has its own column
    head = ["zero", "offload", *extra, "ckpt", "micro", *shown, "per-rank", "host/node", "nvme/node", "s/step",
            "s/sample", "verdict"]
    lines = [[str(e.setup.stage), offload(e.setup), *(f(e.setup) for f in extra.values()),
              "yes" if e.setup.gradient_checkpointing else "no",
              str(e.setup.micro_batch), *(size(e.device[k], unit) for k in shown), size(e.device_total, unit),
              size(e.host_total, unit), size(e.nvme, unit), seconds(times[e.setup]),
              f"{times[e.setup].per_sample:.3g}", e.verdict] for e in rows]
    widths = [max(len(r[i]) for r in [head] + lines) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i in (1, len(r) - 1) else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in lines])


def offload_shown(s: Setup) -> str:
    """The offload's grid name, with the ratio of a partial offload (opt-cpu@0.5)."""
    return label(s, offload_name(s))


def seconds(t: StepTime) -> str:
    """Estimated seconds per optimizer step, 3 significant digits."""
    return f"{t.seconds:.3g}"


def describe_params(s: Setup) -> str:
    """'8.04B parameters, 6.82M trainable' under LoRA; MoE adds the active ones."""
    trainable = f", {describe_count(s.trainable)} trainable" if s.uses_lora else ""
    active = f", {describe_count(s.counts.active)} active per token" if s.arch.is_moe else ""
    if s.tp_size > 1:  # Setup counts one rank's share; the model's own size comes first
        return (f"{describe_count(s.loaded_params)} parameters, {describe_count(s.total_params)} per rank at "
                f"tp.size={s.tp_size}{active}{trainable}")
    return f"{describe_count(s.total_params)} parameters{active}{trainable}"


def describe_architecture(s: Setup, model_cfg=None) -> List[str]:
    """Where the dimensions came from and how they were counted; for MoE, what is planned and what is not."""
    a, counted = s.arch, "exact (transformers on the meta device)"
    preset = model_cfg.name if model_cfg is not None else None
    ignored = f"; preset model={preset}'s dimensions not used" if preset and not uses_preset(model_cfg) else ""
    lines = [f"architecture: {a.model_type}, {a.num_hidden_layers} layers, hidden {a.hidden_size}, from "
             f"{a.source or 'the preset'}{ignored}; count {counted}"]
    if not measured(a.model_type):
        lines.append(f"activations: {a.model_type} is not among the measured families; its layers are charged "
                     f"Llama's measured coefficients")
    if a.is_moe:
        lines.append(f"mixture of experts: {a.moe_layers} MoE layers x {a.num_experts} experts, {a.experts_per_token} "
                     f"per token; model states count every expert on every rank (expert parallelism is out of "
                     f"scope); activations and step time count the experts each token is routed to, and shared experts")
    return lines


def describe_sequence(s: Setup) -> str:
    split = f", {s.seq_len // s.sp_size} per rank (Ulysses over {s.sp_size} ranks)" if s.sp_size > 1 else ""
    return f"sequence {s.seq_len} tokens{split}"


def describe_setup(s: Setup, cluster_name: str, model_name: str, unit: str, model_cfg=None) -> List[str]:
    capacity = ("judged against host RAM (CPU ranks)" if s.judged_on_host
                else f"{s.gpu_memory_gb:g} GiB per GPU")
    lora = f", LoRA r={s.lora_r}" if s.uses_lora else ""
    lora += f" over a {s.quant_bits}-bit base (bitsandbytes)" if s.quant_bits else ""
    return [f"trl_ds plan: {model_name} ({describe_params(s)}, largest module "
            f"{describe_count(s.counts.largest_module)}){lora}, {s.dtype}, {describe_sequence(s)}",
            *describe_architecture(s, model_cfg), *trainers.describe(s),
            f"cluster {cluster_name}: {s.nodes} node(s) x {s.gpus_per_node} {s.device} rank(s), {capacity}, "
            f"{s.cpu_memory_gb:g} GiB host RAM per node",
            f"{unit}; rows that fit first, fastest first (estimated seconds per sample); per-rank: a step's peak "
            "torch.cuda.max_memory_allocated, + overhead (allocator cache, CUDA context); host/node: "
            + ("every rank's bytes plus offloaded states" if s.judged_on_host
               else "offloaded states x DeepSpeed's 1.5, pinned buffers, rank processes")]


def summary_line(e: Estimate) -> str:
    s = e.setup
    split = (f" tp={s.tp_size}" if s.tp_size > 1 else "") + (f" sp={s.sp_size}" if s.sp_size > 1 else "")
    split += f" bf16-opt={opt16_label(s)}" if s.bf16_master or s.bf16_states else ""
    return (f"zero=stage{s.stage} offload={offload_shown(s)}{split} ckpt={'yes' if s.gradient_checkpointing else 'no'} "
            f"micro={s.micro_batch}: {size(e.device_total)} GiB per rank, {size(e.host_total)} GiB host per node, "
            f"{e.verdict}")


def render(rows: Sequence[Estimate], current: Estimate, names: Tuple[str, str], overrides: Sequence[str],
           times: Times, only_fitting: bool = False, model_cfg=None) -> str:
    shown = [e for e in rows if e.verdict == "fits"] if only_fitting else rows
    lines = describe_setup(current.setup, *names, table_unit(rows)[1], model_cfg) + [
        "", render_table(shown or rows, times), "", f"current:     {summary_line(current)}"]
    best = recommend(rows, times)
    if best is None:
        smallest = min(rows, key=lambda e: e.device_total)
        lines += [f"nothing fits; the smallest is {summary_line(smallest)}.",
                  "Add GPUs (cluster.nodes=...), shorten sequences (trainer.max_length=...) or use larger devices."]
    else:
        lines += [f"recommended: {summary_line(best)}", f"  why: {reason(best, rows, times)}",
                  f"  run: {run_command(best.setup, overrides)}"]
    return "\n".join(lines)


def as_json(rows: Sequence[Estimate], current: Estimate, names: Tuple[str, str], overrides: Sequence[str],
            times: Times) -> dict:
    s, best = current.setup, recommend(rows, times)
    a = s.arch
    return {"model": names[1], "parameters": max(s.total_params, s.loaded_params), "trainable_parameters": s.trainable,
            "tp_size": s.tp_size, "parameters_per_rank": s.total_params,
            "active_parameters": s.counts.active + s.adapters.total,
            "architecture": {"model_type": a.model_type, "source": a.source, "count": s.counts.method,
                             "num_hidden_layers": a.num_hidden_layers, "hidden_size": a.hidden_size,
                             "vocab_size": a.vocab_size, "moe_layers": a.moe_layers, "num_experts": a.num_experts,
                             "experts_per_token": a.experts_per_token,
                             "expert_parallelism": "out of scope: every rank holds every expert" if a.is_moe
                             else None},
            "trainer": trainer_json(s),
            "lora_r": s.lora_r, "largest_module": s.counts.largest_module, "dtype": s.dtype, "seq_len": s.seq_len,
            "sp_size": s.sp_size,
            "cluster": {"name": names[0], "nodes": s.nodes, "gpus_per_node": s.gpus_per_node, "device": s.device,
                        "gpu_memory_gb": s.gpu_memory_gb, "cpu_memory_gb": s.cpu_memory_gb},
            "current": row_json(current, times), "rows": [row_json(e, times) for e in rows],
            "recommendation": None if best is None else {**row_json(best, times), "reason": reason(best, rows, times),
                                                         "command": run_command(best.setup, overrides)}}


def trainer_json(s: Setup) -> dict:
    return {"name": s.trainer, "sequences_per_sample": trainers.sequences_per_sample(s.trainer),
            "reference_model": trainers.reference_state(s), "reference_parameters": s.counts.total
            if trainers.keeps_reference(s) else 0, "head": "score" if s.trainer == "reward" else "lm_head",
            "num_labels": trainers.REWARD_LABELS if s.trainer == "reward" else None,
            "generation": {"completions_per_rank": trainers.generation_sequences(s), "num_generations":
                           s.num_generations, "max_completion_length": s.completion_len,
                           "ds3_gather_for_generation": s.ds3_gather} if s.trainer in trainers.GENERATING else None}


def row_json(e: Estimate, times: Times) -> dict:
    s, t = e.setup, times[e.setup]
    return {"zero_stage": s.stage, "offload": offload_name(s), "offload_optimizer": s.optimizer_offload,
            "offload_param": s.param_offload, "offload_ratio": partial_ratio(s), "tp_size": s.tp_size,
            "sp_size": s.sp_size,
            "precision": {"bf16_master_weights_and_grads": s.bf16_master, "bf16_optimizer_states": s.bf16_states},
            "gradient_checkpointing": s.gradient_checkpointing,
            "micro_batch": s.micro_batch, "device_bytes": dict(e.device), "device_total_bytes": e.device_total,
            "buffer_items": dict(e.buffer_items), "generation_items": dict(e.generation_items),
            "host_bytes": dict(e.host), "host_total_bytes": e.host_total,
            "nvme_bytes": e.nvme, "after_step_bytes": e.after_step,
            "reference_after_step_bytes": e.reference_after_step, "verdict": e.verdict,
            "step_seconds": t.seconds, "step_terms": dict(t.terms), "samples_per_step": t.samples,
            "overrides": grid_overrides(s)}

