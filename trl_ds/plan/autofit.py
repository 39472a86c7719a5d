"""`zero=auto`, `offload=auto`, `trainer.per_device_train_batch_size=auto`, `trainer.gradient_checkpointing=auto`:
choose, at compose time, the configuration with the least estimated time per sample among those the memory estimate
says fit, then carry on exactly as if the user had typed it.

Candidates are the planner's valid ZeRO stage × offload pairs × micro-batches that divide batch.global_size over the
data-parallel ranks × checkpointing, × the tp/sp sizes and 16-bit optimizer options asked for (plan/dimensions.py);
only the `auto` choices vary, and with offload=auto at ZeRO-3 partial offload ratios too (optimizer_places.RATIOS).
Ties are broken by the planner's speed heuristic, then by order, so the choice is deterministic. The text names the
runner-up and, under tp/sp=auto, the fastest at another size, each against the winner.
"""
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Tuple

from trl_ds.config.values import checkpointing, micro_batch
from trl_ds.errors import ConfigError
from trl_ds.plan import trainers
from trl_ds.plan.dimensions import OPT16, SP, TP, auto_groups, bases, opt16_label, set_sizes
from trl_ds.plan.grid import OFFLOADS, micro_batches, offload_name, setups, with_ratios
from trl_ds.plan.memory import Estimate, Setup, estimate
from trl_ds.plan.optimizer_places import bf16_allows, label, partial_ratio
from trl_ds.plan.planner import size, speed_key
from trl_ds.plan.steptime import StepTime, accumulation_for, hardware_from_config, step_time

SHOWN = 5  # candidates printed
TIE = 0.005  # a runner-up within 0.5 % per sample is called as fast: the tie-break (planner.speed_key) decided


@dataclass
class Candidate:
    estimate: Estimate
    time: StepTime
    auto: tuple  # the `auto` choices, which the label shows

    @property
    def fits(self) -> bool:
        return self.estimate.verdict == "fits"

    def label(self) -> str:
        s = self.estimate.setup
        parts = [f"zero=stage{s.stage}", f"offload={label(s, offload_name(s))}"]
        parts += [f"tp={s.tp_size}"] if TP in self.auto else []
        parts += [f"sp={s.sp_size}"] if SP in self.auto else []
        parts += [f"bf16-opt={opt16_label(s)}"] if OPT16 in self.auto else []
        parts += [f"micro={s.micro_batch}"] if MICRO in self.auto else []
        parts += [f"ckpt={'yes' if s.gradient_checkpointing else 'no'}"] if CHECKPOINTING in self.auto else []
        return " ".join(parts)


MICRO, CHECKPOINTING = "trainer.per_device_train_batch_size", "trainer.gradient_checkpointing"


def auto_choices(cfg) -> List[str]:
    """The overrides left `auto`, in the order they are reported."""
    flags = {"zero": cfg.zero.get("auto", False), "offload": cfg.offload.get("auto", False),
             MICRO: micro_batch(cfg) is None, CHECKPOINTING: checkpointing(cfg) is None}
    return [name for name, is_auto in flags.items() if is_auto] + auto_groups(cfg)


def check_micro_auto(cfg) -> None:
    """An automatic micro-batch trades accumulation for memory at a fixed global batch: it needs one."""
    if not cfg.batch.global_size:
        raise ConfigError([f"{MICRO}=auto holds the global batch fixed while it varies the micro-batch: set "
                           f"batch.global_size (e.g. batch.global_size=64), or give {MICRO} a number."])
    if cfg.trainer.gradient_accumulation_steps is not None:
        raise ConfigError([f"{MICRO}=auto derives trainer.gradient_accumulation_steps from batch.global_size: drop "
                           f"trainer.gradient_accumulation_steps={cfg.trainer.gradient_accumulation_steps}."])


def candidates(cfg, auto: Optional[List[str]] = None, accepts: Optional[Callable[[Setup], bool]] = None
               ) -> List[Candidate]:
    """Every combination the `auto` choices allow and `accepts` accepts, fitting first, fastest first."""
    auto = auto_choices(cfg) if auto is None else auto
    hw, out = hardware_from_config(cfg), []
    for base in bases(cfg):  # one per tp × sp pair and 16-bit option tried, else the config's own
        for setup in search(cfg, base, auto):
            if not bf16_allows(setup) or (accepts is not None and not accepts(setup)):  # the check would refuse it
                continue
            e = estimate(setup)
            accumulation = accumulation_for(setup, cfg.batch.global_size, cfg.trainer.gradient_accumulation_steps)
            out.append(Candidate(e, step_time(setup, hw, accumulation), tuple(auto)))
    return sorted(out, key=lambda c: (not c.fits, c.time.per_sample, speed_key(c.estimate)))


def search(cfg, base: Setup, auto: List[str]):
    """The grid points around `base` that the `auto` choices vary."""
    stages = range(4) if "zero" in auto else [base.stage]
    names = list(OFFLOADS) if "offload" in auto else [offload_name(base)]
    micros = micro_batches(base, cfg.batch.global_size) if MICRO in auto else [base.micro_batch]
    ckpts = (False, True) if CHECKPOINTING in auto else (base.gradient_checkpointing,)
    grid = setups(base, micros, stages=stages, offloads=names, checkpointing=ckpts)
    return with_ratios(grid) if "offload" in auto else grid


def why(winner: Candidate, ranked: List[Candidate]) -> str:
    """What the winner saves over the runner-up that fits, and what would be faster but does not fit."""
    fitting = [c for c in ranked if c.fits]
    parts = [f"least estimated time per sample of the {len(fitting)} that fit"]
    if len(fitting) > 1:
        other = fitting[1]
        saved = {k: other.time.terms[k] - v for k, v in winner.time.terms.items()}
        term = max(saved, key=saved.get)
        gain = 1 - winner.time.per_sample / other.time.per_sample
        if gain < TIE:
            parts.append(f"as fast as {other.label()} by the estimate, and first on the tie-break (fp32 optimizer "
                         f"side, then less offload, no recomputation, no ZeRO-3, the larger micro-batch)")
        else:
            parts.append(f"{gain:.0%} faster than {other.label()}, mostly {term} ({other.time.terms[term]:.3g} s -> "
                         f"{winner.time.terms[term]:.3g} s)")
    faster = [c.label() for c in ranked if not c.fits and c.time.per_sample < winner.time.per_sample]
    if faster:
        more = f" and {len(faster) - 3} more" if len(faster) > 3 else ""
        parts.append(f"faster but does not fit: {', '.join(faster[:3])}{more}")
    return "; ".join(parts)


def differences(a: Setup, b: Setup) -> str:
    """The choices two candidates differ in, `name a vs b`."""
    pairs = {"zero": (a.stage, b.stage), "offload": (label(a, offload_name(a)), label(b, offload_name(b))),
             "tp": (a.tp_size, b.tp_size), "sp": (a.sp_size, b.sp_size), "bf16-opt": (opt16_label(a), opt16_label(b)),
             "micro": (a.micro_batch, b.micro_batch),
             "ckpt": (a.gradient_checkpointing, b.gradient_checkpointing)}
    return ", ".join(f"{name} {x} vs {y}" for name, (x, y) in pairs.items() if x != y)


def rivals(winner: Candidate, ranked: List[Candidate]) -> List[Tuple[str, Candidate]]:
    """The runner-up that fits and, for tp=auto / sp=auto, the fastest that fits at another size than the
    winner's (so a split is shown against the best without it, and the other way round)."""
    fitting = [c for c in ranked if c.fits]
    out = [("runner-up", fitting[1])] if len(fitting) > 1 else []
    s = winner.estimate.setup
    for group, size_of in ((TP, "tp_size"), (SP, "sp_size")):
        other = next((c for c in fitting if getattr(c.estimate.setup, size_of) != getattr(s, size_of)), None)
        if group in winner.auto and other is not None and all(other is not c for _, c in out):
            out.append((f"fastest at another {group} size", other))
    return out


def versus(winner: Candidate, ranked: List[Candidate]) -> List[str]:
    """One line per rival: its time and memory against the winner's, and what differs."""
    w = winner.estimate
    return [f"{name}: {c.label()}: {c.time.seconds:.3g} s/step ({c.time.per_sample / winner.time.per_sample - 1:+.0%}"
            f" per sample), {size(c.estimate.device_total)} vs {size(w.device_total)} GiB per rank; "
            f"{differences(c.estimate.setup, w.setup)}" for name, c in rivals(winner, ranked)]


def apply(cfg, winner: Candidate) -> None:
    """Set the winner's choices as typed overrides would; `auto` off."""
    s = winner.estimate.setup
    cfg.zero.stage, cfg.zero.auto = s.stage, False
    cfg.offload.optimizer, cfg.offload.param, cfg.offload.auto = s.optimizer_offload, s.param_offload, False
    cfg.offload.ratio = partial_ratio(s)  # 1 where a ratio does not apply: the check refuses one there
    if cfg.offload.ratio < 1.0:
        cfg.zero.sub_group_size = s.sub_group_size
    cfg.trainer.per_device_train_batch_size = s.micro_batch
    cfg.trainer.gradient_checkpointing = s.gradient_checkpointing
    if TP in winner.auto or SP in winner.auto:
        set_sizes(cfg, s.tp_size, s.sp_size)
        cfg.tp.auto = cfg.sp.auto = False
    if OPT16 in winner.auto:
        p = cfg.precision
        p.bf16_master_weights_and_grads, p.bf16_optimizer_states = s.bf16_master, s.bf16_states
        p.bf16_optimizer_auto = False


def row(c: Candidate) -> dict:
    s = c.estimate.setup
    return {"zero_stage": s.stage, "offload": offload_name(s), "offload_ratio": partial_ratio(s),
            "tp_size": s.tp_size, "sp_size": s.sp_size, "bf16_master_weights_and_grads": s.bf16_master,
            "bf16_optimizer_states": s.bf16_states,
            "micro_batch": s.micro_batch,
            "gradient_checkpointing": s.gradient_checkpointing, "device_total_bytes": c.estimate.device_total,
            "host_total_bytes": c.estimate.host_total, "verdict": c.estimate.verdict,
            "step_seconds": c.time.seconds, "seconds_per_sample": c.time.per_sample, "step_terms": dict(c.time.terms)}


def render(ranked: List[Candidate], winner: Candidate, reason: str) -> str:
    lines = ["trl_ds auto-fit (estimated; rank, choice, per-rank GiB, host GiB per node, s/step, verdict):"]
    width = max(len(c.label()) for c in ranked[:SHOWN])
    for i, c in enumerate(ranked[:SHOWN], 1):
        lines.append(f"  {i}. {c.label():<{width}} {size(c.estimate.device_total):>7} {size(c.estimate.host_total):>7} "
                     f"{c.time.seconds:>9.3g}  {c.estimate.verdict}")
    lines += [f"  chosen: {winner.label()}", f"  why: {reason}", *(f"  {line}" for line in versus(winner, ranked))]
    return "\n".join(lines)


def trainer_hint(ranked: List[Candidate]) -> str:
    """A trainer setting with which some candidate fits: named, not chosen (it changes what is trained)."""
    if not ranked:
        return ""
    for overrides, changes in trainers.fixes(ranked[0].estimate.setup):
        fitting = [c for c in ranked if estimate(replace(c.estimate.setup, **changes)).verdict == "fits"]
        if fitting:
            return f" With {' '.join(overrides)}, {fitting[0].label()} fits."
    return ""


def resolve(cfg, check: Optional[Callable] = None) -> Optional[dict]:
    """Replace the `auto` choices in `cfg` by the winner (in place); the ranking for plan.json and the text to print.
    None when nothing is `auto`; ConfigError when nothing fits. `check(cfg)` gives the launch's check of a candidate
    (trl_ds/check/plan_rows.py RowCheck), so the winner is one the launch accepts."""
    auto = auto_choices(cfg)
    if not auto:
        return None
    if MICRO in auto:
        check_micro_auto(cfg)
    ranked = candidates(cfg, auto, check(cfg) if check else None)
    if not ranked or not ranked[0].fits:
        smallest = min(ranked, key=lambda c: c.estimate.device_total) if ranked else None
        closest = f" The smallest is {smallest.label()} at {size(smallest.estimate.device_total)} GiB per rank." \
            if smallest else ""
        closest += trainer_hint(ranked)
        raise ConfigError([f"{', '.join(f'{name}=auto' for name in auto)}: none of the {len(ranked)} candidates fits "
                           f"on cluster={cfg.cluster.name}.{closest} Add GPUs (cluster.nodes=...), shorten sequences "
                           f"(trainer.max_length=...), set trainer.gradient_checkpointing=true or lower "
                           f"trainer.per_device_train_batch_size."])
    winner = ranked[0]
    reason = why(winner, ranked)
    apply(cfg, winner)
    return {"choices": auto, "winner": row(winner), "reason": reason, "versus": versus(winner, ranked),
            "ranking": [row(c) for c in ranked],
            "text": render(ranked, winner, reason)}
