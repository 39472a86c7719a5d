"""How long the whole run takes, and its GPU-hours: optimizer steps × the estimated seconds per step, × the GPUs.

The steps are trainer.max_steps, else trainer.num_train_epochs over the training rows as transformers counts them
(trl_ds/config/training_steps.py), or tokens / (samples per step × trainer.max_length) for `trl-ds plan --tokens`.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from trl_ds.config.batch import Batch
from trl_ds.config.training_steps import training_steps
from trl_ds.errors import ConfigError
from trl_ds.plan.memory import Setup
from trl_ds.plan.params import describe_count

TOKENS_FLAG = "--tokens"


@dataclass(frozen=True)
class RunTime:
    steps: Optional[int]  # None: not known before launch (`how` says why)
    how: str  # where the steps come from
    step_seconds: float
    gpus: int  # every rank of the cluster, busy for the whole run
    device: str = "cuda"

    @property
    def seconds(self) -> Optional[float]:
        return None if self.steps is None else self.steps * self.step_seconds

    @property
    def gpu_hours(self) -> Optional[float]:
        return None if self.steps is None else self.seconds * self.gpus / 3600

    def describe(self, estimated: bool = True) -> str:
        """'2000 steps (trainer.max_steps) × 42.1 s = 23.3 h, 187 GPU-hours on 8 GPUs (estimated)'."""
        if self.steps is None:
            return f"not known before launch ({self.how})"
        unit = "GPU" if self.device == "cuda" else "rank"
        return (f"{self.steps} steps ({self.how}) × {self.step_seconds:.3g} s = {duration(self.seconds)}, "
                f"{self.gpu_hours:.3g} {unit}-hours on {self.gpus} {unit}s" + (" (estimated)" if estimated else ""))

    def as_json(self) -> dict:
        return {"optimizer_steps": self.steps, "steps_from": self.how, "step_seconds": self.step_seconds,
                "seconds": self.seconds, "gpus": self.gpus, "gpu_hours": self.gpu_hours}


def duration(seconds: float) -> str:
    """Seconds as the largest unit that keeps a number >= 1: 90 -> '1.5 min', 84000 -> '23.3 h', 4e6 -> '46.3 d'."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def run_steps(cfg, s: Setup, samples_per_step: int, tokens: Optional[float] = None) -> Tuple[Optional[int], str]:
    """(optimizer steps, where they come from) for the configuration `s` taking `samples_per_step` per step."""
    if tokens:
        per_step = samples_per_step * cfg.trainer.max_length
        return math.ceil(tokens / per_step), f"{describe_count(int(tokens))} tokens / {per_step} per step"
    if cfg.trainer.max_steps > 0:
        return cfg.trainer.max_steps, "trainer.max_steps"
    accumulation = max(samples_per_step // (s.micro_batch * s.data_parallel), 1)
    training = training_steps(cfg, Batch(micro=s.micro_batch, world=s.data_parallel, accumulation=accumulation))
    if training["optimizer_steps"] is None:
        return None, training["not_counted"]
    return training["optimizer_steps"], (f"{training['num_train_epochs']:g} epochs × {training['steps_per_epoch']} "
                                         f"steps of {training['train_rows']} rows")


def run_time(cfg, s: Setup, step_seconds: float, samples_per_step: int, tokens: Optional[float] = None) -> RunTime:
    steps, how = run_steps(cfg, s, samples_per_step, tokens)
    return RunTime(steps=steps, how=how, step_seconds=step_seconds, gpus=s.nodes * s.gpus_per_node, device=s.device)


def split_tokens(args: Sequence[str]) -> Tuple[List[str], Optional[float]]:
    """The arguments without `--tokens N` (or `--tokens=N`), and N; ConfigError for a missing or bad number."""
    rest, tokens, i = [], None, 0
    while i < len(args):
        arg = args[i]
        if arg == TOKENS_FLAG or arg.startswith(TOKENS_FLAG + "="):
            text = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if "=" in arg else 2
            tokens = parse_tokens(text)
            continue
        rest.append(arg)
        i += 1
    return rest, tokens


def parse_tokens(text: str) -> float:
    try:
        tokens = float(text)
    except ValueError:
        tokens = 0.0
    if not tokens > 0 or math.isinf(tokens):
        raise ConfigError([f"{TOKENS_FLAG} {text!r}: give the number of training tokens, e.g. {TOKENS_FLAG} 2e9."])
    return tokens


def whole_runs(cfg, named, times, tokens: Optional[float] = None) -> Dict[str, RunTime]:
    """Each named estimate's whole run ('current', 'recommended'), from its row's step time; None entries skipped."""
    return {name: run_time(cfg, e.setup, times[e.setup].seconds, times[e.setup].samples, tokens)
            for name, e in named if e is not None}


def current_run(cfg, s: Setup, row: dict) -> RunTime:
    """The whole run of plan.json's current row (its step seconds and samples per step)."""
    return run_time(cfg, s, row["step_seconds"], row["samples_per_step"])


def render_runs(runs: Dict[str, RunTime]) -> str:
    return "\n".join(f"whole run, {name}: {rt.describe(estimated=False)}" for name, rt in runs.items())


def runs_json(runs: Dict[str, RunTime]) -> dict:
    return {name: {**rt.as_json(), "text": rt.describe()} for name, rt in runs.items()}
