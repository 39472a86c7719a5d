"""`trl-ds plan --need [--gpus A,B] [--counts 1,8,16,32] [--tokens N] [overrides]`: which hardware can train this?

For every GPU preset trl_ds ships (trl_ds/plan/hardware/*.yaml with a memory_gb; --gpus names presets or hardware
YAML files instead) × every GPU count (8 per node from 8 up), auto-fit (trl_ds/plan/autofit.py) finds the fastest
configuration that fits, over the choices the command line leaves open: zero, offload, checkpointing and, with
batch.global_size, the micro-batch. Host RAM per node (cluster.cpu_memory_gb, cluster=1x8's unless given) is part of
"fits", as in every plan. The shapes that fit are sorted by the whole run's GPU-hours (trl_ds/plan/runtime.py; at
one global batch, GPU-seconds per sample when the steps are not known before launch); the one with the least GPU
memory in all (then the fewest GPUs) is marked as the smallest that fits.
"""
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError
from trl_ds.plan.autofit import Candidate, candidates
from trl_ds.plan.memory import Setup
from trl_ds.plan.planner import size
from trl_ds.plan.runtime import RunTime, duration, run_time
from trl_ds.plan.steptime import HARDWARE_DIR, read_preset

RowCheckFactory = Optional[Callable[[object], Callable[[Setup], bool]]]

COUNTS = (1, 8, 16, 32)
PER_NODE = 8  # GPUs per node once a shape has 8 or more
LEFT_OPEN = {"zero=": "zero=auto", "offload=": "offload=auto",
             "trainer.gradient_checkpointing=": "trainer.gradient_checkpointing=auto",
             "trainer.per_device_train_batch_size=": "trainer.per_device_train_batch_size=auto"}


@dataclass
class Shape:
    gpu: str  # preset name or hardware file
    memory_gb: float
    gpus: int
    best: Optional[Candidate] = None  # the fastest configuration that fits; None: nothing does
    run: Optional[RunTime] = None
    why_not: str = ""
    smallest: bool = False

    @property
    def nodes(self) -> int:
        return max(self.gpus // PER_NODE, 1)

    @property
    def cost(self) -> float:
        """GPU-seconds per sample: the order of GPU-hours at one global batch, known when the steps are not."""
        return self.best.time.per_sample * self.gpus


def presets() -> List[str]:
    """The shipped GPU presets: those that state a card's memory (the CPU ones do not)."""
    import os

    names = sorted(f[:-5] for f in os.listdir(HARDWARE_DIR) if f.endswith(".yaml"))
    return [n for n in names if (read_preset(n).get("memory_gb") or 0) > 0]


def shape_overrides(overrides: Sequence[str], gpu: str, memory_gb: float, gpus: int) -> List[str]:
    given = [o.lstrip("+") for o in overrides]
    cluster = [] if any(o.startswith("cluster=") for o in given) else ["cluster=1x8"]
    open_ = [auto for key, auto in LEFT_OPEN.items() if not any(o.startswith(key) for o in given)]
    if not any(o.startswith("batch.global_size=") for o in given):
        open_.remove("trainer.per_device_train_batch_size=auto")  # holds no global batch to divide
    per_node = min(gpus, PER_NODE)
    return [*cluster, *overrides, *open_, f"cluster.gpu={gpu}", f"cluster.gpu_memory_gb={memory_gb:g}",
            f"cluster.nodes={max(gpus // per_node, 1)}", f"cluster.gpus_per_node={per_node}", "cluster.device=cuda"]


def fit_shape(overrides: Sequence[str], gpu: str, memory_gb: float, gpus: int, tokens: Optional[float],
              row_check: RowCheckFactory = None) -> Shape:
    shape = Shape(gpu=gpu, memory_gb=memory_gb, gpus=gpus)
    try:
        cfg = compose(shape_overrides(overrides, gpu, memory_gb, gpus))
        ranked = candidates(cfg, accepts=row_check(cfg) if row_check else None)
    except ConfigError as err:
        shape.why_not = " / ".join(err.problems)
        return shape
    fitting = [c for c in ranked if c.fits]
    if not fitting:
        smallest = min((c.estimate.device_total for c in ranked), default=0)
        shape.why_not = f"nothing fits (smallest {size(smallest)} GiB per rank)"
        return shape
    shape.best = fitting[0]
    t = shape.best.time
    shape.run = run_time(cfg, shape.best.estimate.setup, t.seconds, t.samples, tokens)
    return shape


def check_batch(overrides: Sequence[str], counts: Sequence[int]) -> Optional[int]:
    """The global batch every shape trains at: batch.global_size, a multiple of every count."""
    cfg = compose(overrides)
    global_size = cfg.batch.global_size
    if not global_size:
        raise ConfigError(["trl-ds plan --need compares cluster shapes at one global batch: set batch.global_size "
                           "(e.g. batch.global_size=64)."])
    uneven = [n for n in counts if global_size % n]
    if uneven:
        raise ConfigError([f"batch.global_size={global_size} does not divide over {uneven[0]} GPUs: use a multiple "
                           f"of every count (--counts {','.join(map(str, counts))}), or name fewer counts."])
    return global_size


def need(overrides: Sequence[str], gpus: Sequence[str], counts: Sequence[int], tokens: Optional[float] = None,
         row_check: RowCheckFactory = None) -> Tuple[List[Shape], List[Shape]]:
    """(shapes that fit, cheapest first, the smallest marked; shapes that do not). row_check(cfg): the launch's check
    of a shape's candidates (trl_ds/check/plan_rows.py RowCheck), so no shape is fitted with a config it refuses."""
    check_batch(overrides, counts)
    shapes = [fit_shape(overrides, g, memory_of(g), n, tokens, row_check) for g in gpus for n in counts]
    fitting = sorted((s for s in shapes if s.best), key=lambda s: (s.cost, s.gpus))
    if fitting:
        min(fitting, key=lambda s: (s.memory_gb * s.gpus, s.gpus)).smallest = True
    return fitting, [s for s in shapes if not s.best]


def memory_of(gpu: str) -> float:
    memory = read_preset(gpu).get("memory_gb") or 0
    if memory <= 0:
        raise ConfigError([f"--gpus {gpu}: the hardware file gives no memory_gb, so what fits is unknown. Add "
                           f"memory_gb: <GiB per GPU> to it."])
    return float(memory)


def render(fitting: List[Shape], misfits: List[Shape], tokens_or_steps: str) -> str:
    head = ["", "gpu", "GPUs", "nodes", "fastest configuration that fits", "GiB/rank", "host GiB/node", "s/step",
            "whole run", "GPU-hours"]
    rows = [["*" if s.smallest else "", s.gpu, str(s.gpus), str(s.nodes), s.best.label(),
             size(s.best.estimate.device_total), size(s.best.estimate.host_total), f"{s.best.time.seconds:.3g}",
             duration(s.run.seconds) if s.run.steps else "?", f"{s.run.gpu_hours:.3g}" if s.run.steps else "?"]
            for s in fitting]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i in (1, 4) else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    lines = [f"trl_ds plan --need: {tokens_or_steps}; cheapest first (GPU-hours); * the smallest that fits", ""]
    lines += [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows] if rows else \
        ["nothing fits on any of these shapes."]
    lines += [""] + [f"does not fit: {s.gpu} x{s.gpus}: {s.why_not}" for s in misfits] if misfits else []
    return "\n".join(lines)


def as_json(fitting: List[Shape], misfits: List[Shape]) -> dict:
    def row(s: Shape) -> dict:
        out = {"gpu": s.gpu, "memory_gb": s.memory_gb, "gpus": s.gpus, "nodes": s.nodes}
        if not s.best:
            return {**out, "fits": False, "why_not": s.why_not}
        e = s.best.estimate
        return {**out, "fits": True, "smallest": s.smallest, "configuration": s.best.label(),
                "device_total_bytes": e.device_total, "host_total_bytes": e.host_total,
                "step_seconds": s.best.time.seconds, "seconds_per_sample": s.best.time.per_sample,
                "whole_run": s.run.as_json()}
    return {"fitting": [row(s) for s in fitting], "not_fitting": [row(s) for s in misfits]}
