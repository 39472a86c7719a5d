"""`zero=auto` / `offload=auto`: choose, at compose time, the configuration with the least estimated time per sample
among those the memory estimate says fit, then carry on exactly as if the user had typed it.

    python -m trl_ds model=llama3-70b cluster=1x8 zero=auto offload=auto dry_run=true

Candidates are the planner's valid ZeRO stage × offload pairs (only the `auto` choices vary; micro-batch and
checkpointing stay as configured). Memory: trl_ds/memory/estimate.py; time: trl_ds/steptime.py. Ties are broken by
the planner's speed heuristic, then by the candidate's order, so the choice is deterministic.
"""
from dataclasses import dataclass, replace
from typing import List, Optional

from .errors import ConfigError
from .memory.estimate import Estimate, estimate, setup_from_config
from .plan import OFFLOADS, config_dir, offload_name, size, speed_key, valid
from .steptime import StepTime, accumulation_for, hardware_from_config, step_time

SHOWN = 5  # candidates printed


@dataclass
class Candidate:
    estimate: Estimate
    time: StepTime

    @property
    def fits(self) -> bool:
        return self.estimate.verdict == "fits"

    def label(self) -> str:
        return f"zero=stage{self.estimate.setup.stage} offload={offload_name(self.estimate.setup)}"


def wanted(cfg) -> bool:
    return bool(cfg.zero.get("auto", False) or cfg.offload.get("auto", False))


def candidates(cfg) -> List[Candidate]:
    """Every valid pair the `auto` choices allow, fastest (per sample) first, those that fit before the rest."""
    base = setup_from_config(cfg)
    stages = range(4) if cfg.zero.auto else [base.stage]
    names = list(OFFLOADS) if cfg.offload.auto else [offload_name(base)]
    hw = hardware_from_config(cfg, config_dir())
    out = []
    for stage in stages:
        for name in (n for n in names if n in OFFLOADS and valid(stage, n)):
            optimizer, param = OFFLOADS[name]
            e = estimate(replace(base, stage=stage, optimizer_offload=optimizer, param_offload=param))
            accumulation = accumulation_for(e.setup, cfg.batch.global_size, cfg.trainer.gradient_accumulation_steps)
            out.append(Candidate(e, step_time(e.setup, hw, accumulation)))
    return sorted(out, key=lambda c: (not c.fits, c.time.per_sample, speed_key(c.estimate)))


def why(winner: Candidate, ranked: List[Candidate]) -> str:
    """What the winner saves over the runner-up that fits, and what would be faster but does not fit."""
    fitting = [c for c in ranked if c.fits]
    parts = [f"least estimated time per sample of the {len(fitting)} that fit"]
    if len(fitting) > 1:
        other = fitting[1]
        saved = {k: other.time.terms[k] - v for k, v in winner.time.terms.items()}
        term = max(saved, key=saved.get)
        gain = 1 - winner.time.per_sample / other.time.per_sample
        parts.append(f"{gain:.0%} faster than {other.label()}, mostly {term} ({other.time.terms[term]:.3g} s -> "
                     f"{winner.time.terms[term]:.3g} s)")
    faster = [c.label() for c in ranked if not c.fits and c.time.per_sample < winner.time.per_sample]
    if faster:
        more = f" and {len(faster) - 3} more" if len(faster) > 3 else ""
        parts.append(f"faster but does not fit: {', '.join(faster[:3])}{more}")
    return "; ".join(parts)


def apply(cfg, winner: Candidate) -> None:
    """Set the winner's choices as a typed override would: zero.stage, offload.optimizer/param; `auto` off."""
    s = winner.estimate.setup
    cfg.zero.stage, cfg.zero.auto = s.stage, False
    cfg.offload.optimizer, cfg.offload.param, cfg.offload.auto = s.optimizer_offload, s.param_offload, False


def row(c: Candidate) -> dict:
    s = c.estimate.setup
    return {"zero_stage": s.stage, "offload": offload_name(s), "device_total_bytes": c.estimate.device_total,
            "host_total_bytes": c.estimate.host_total, "verdict": c.estimate.verdict,
            "step_seconds": c.time.seconds, "seconds_per_sample": c.time.per_sample, "step_terms": dict(c.time.terms)}


def render(ranked: List[Candidate], winner: Candidate, reason: str) -> str:
    lines = ["trl_ds auto-fit (estimated; rank, choice, per-rank GiB, host GiB per node, s/step, verdict):"]
    for i, c in enumerate(ranked[:SHOWN], 1):
        lines.append(f"  {i}. {c.label():<34} {size(c.estimate.device_total):>7} {size(c.estimate.host_total):>7} "
                     f"{c.time.seconds:>9.3g}  {c.estimate.verdict}")
    lines += [f"  chosen: {winner.label()}", f"  why: {reason}"]
    return "\n".join(lines)


def resolve(cfg) -> Optional[dict]:
    """Replace the `auto` choices in `cfg` by the winner (in place); the ranking for plan.json and the text to print.
    None when nothing is `auto`; ConfigError when nothing fits."""
    if not wanted(cfg):
        return None
    ranked = candidates(cfg)
    if not ranked or not ranked[0].fits:
        smallest = min(ranked, key=lambda c: c.estimate.device_total) if ranked else None
        closest = f" The smallest is {smallest.label()} at {size(smallest.estimate.device_total)} GiB per rank." \
            if smallest else ""
        raise ConfigError([f"zero=auto/offload=auto: none of the {len(ranked)} candidates fits on "
                           f"cluster={cfg.cluster.name}.{closest} Add GPUs (cluster.nodes=...), shorten sequences "
                           f"(trainer.max_length=...), set trainer.gradient_checkpointing=true or lower "
                           f"trainer.per_device_train_batch_size."])
    winner, choices = ranked[0], [k for k in ("zero", "offload") if cfg[k].auto]
    reason = why(winner, ranked)
    apply(cfg, winner)
    return {"choices": choices, "winner": row(winner), "reason": reason, "ranking": [row(c) for c in ranked],
            "text": render(ranked, winner, reason)}
