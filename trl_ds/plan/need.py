"""`trl-ds plan --need [--gpus A,B] [--counts 1,8,16,32] [--tokens N] [overrides]`: which hardware can train this?

For every GPU preset (trl_ds/plan/hardware/*.yaml with a memory_gb; --gpus names presets or YAML files instead) ×
every GPU count (8 per node from 8 up) that the global batch divides over (the others listed as skipped, with why),
auto-fit finds the fastest configuration that fits (host RAM per node included: cluster.cpu_memory_gb, cluster=1x8's
unless given) over the choices the command line
and the files it names leave open (read by the one resolve the command passes in as `load`). The shapes that fit are
sorted by the whole run's GPU-hours (trl_ds/plan/runtime.py; GPU-seconds per sample when the steps are not known);
the one with the least GPU memory in all (then the fewest GPUs) is marked as the smallest that fits. Each row is
printed as the overrides that set it and the whole command that launches it (planner.run_command)."""
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError
from trl_ds.plan.autofit import Candidate, candidates
from trl_ds.plan.dimensions import OPT16
from trl_ds.plan.memory import Setup
from trl_ds.plan.planner import grid_overrides, run_command, size
from trl_ds.plan.runtime import RunTime, duration, run_time
from trl_ds.plan.steptime import HARDWARE_DIR, read_preset

RowCheckFactory = Optional[Callable[[object], Callable[[Setup], bool]]]
# overrides -> the config the run launches (ConfigError where refused). compose reads the command line alone; the
# command (trl_ds/cli/plan.py) passes the one resolve, which imports the files users bring (plan/ may not import it)
Load = Callable[[Sequence[str]], object]

COUNTS = (1, 8, 16, 32)
PER_NODE = 8  # GPUs per node once a shape has 8 or more
LEFT_OPEN = {"zero=": "zero=auto", "offload=": "offload=auto",
             "trainer.gradient_checkpointing=": "trainer.gradient_checkpointing=auto",
             "trainer.per_device_train_batch_size=": "trainer.per_device_train_batch_size=auto"}
# a file's key that makes a LEFT_OPEN choice, as the command line's prefix for it (the others are their own)
FILE_CHOICE = {"zero.stage": "zero=", "offload.optimizer": "offload=", "offload.param": "offload="}
# the overrides (by prefix) that set each auto choice; others are their own prefix (tp, sp, trainer.*)
CHOICE_KEYS = {"zero": ("zero=",), "offload": ("offload", "zero.sub_group_size="), OPT16: ("precision.",)}


@dataclass
class Shape:
    gpu: str  # preset name or hardware file
    memory_gb: float
    gpus: int
    best: Optional[Candidate] = None  # the fastest configuration that fits; None: nothing does
    run: Optional[RunTime] = None
    why_not: str = ""
    smallest: bool = False
    overrides: List[str] = field(default_factory=list)  # what it was fitted with: the user's, the shape's, the autos

    @property
    def choices(self) -> List[str]:
        """The best configuration's open choices, as overrides (a partial offload with its ratio and sub-group)."""
        keys = tuple(k for auto in self.best.auto for k in CHOICE_KEYS.get(auto, (auto,)))
        return [o for o in grid_overrides(self.best.estimate.setup) if o.startswith(keys)]

    @property
    def command(self) -> str:
        """The command that launches the best configuration on this shape."""
        return run_command(self.best.estimate.setup, self.overrides)

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


def shape_overrides(overrides: Sequence[str], gpu: str, memory_gb: float, gpus: int,
                    from_files: Sequence[str] = ()) -> List[str]:
    """from_files: the keys the user's files set (zero.stage, offload.optimizer, ...): a choice they make is the
    user's as much as one on the command line, so it is not left open (a ZeRO-3 file plans ZeRO-3)."""
    given = [o.lstrip("+") for o in overrides] + [FILE_CHOICE.get(key, f"{key}=") for key in from_files]
    cluster = [] if any(o.startswith("cluster=") for o in given) else ["cluster=1x8"]
    open_ = [auto for key, auto in LEFT_OPEN.items() if not any(o.startswith(key) for o in given)]
    if not any(o.startswith("batch.global_size=") for o in given):
        open_.remove("trainer.per_device_train_batch_size=auto")  # holds no global batch to divide
    per_node = min(gpus, PER_NODE)
    return [*cluster, *overrides, *open_, f"cluster.gpu={gpu}", f"cluster.gpu_memory_gb={memory_gb:g}",
            f"cluster.nodes={max(gpus // per_node, 1)}", f"cluster.gpus_per_node={per_node}", "cluster.device=cuda"]


def fit_shape(overrides: Sequence[str], gpu: str, memory_gb: float, gpus: int, tokens: Optional[float],
              row_check: RowCheckFactory = None, load: Load = compose, from_files: Sequence[str] = ()) -> Shape:
    shape = Shape(gpu=gpu, memory_gb=memory_gb, gpus=gpus,
                  overrides=shape_overrides(overrides, gpu, memory_gb, gpus, from_files))
    try:
        cfg = load(shape.overrides)
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


def usable_counts(overrides: Sequence[str], counts: Sequence[int], load: Load = compose
                  ) -> Tuple[List[int], List[Tuple[int, str]]]:
    """(the counts the global batch divides over, (count, why) for each one it does not). Every shape trains at
    batch.global_size; ConfigError when it is unset or no count can hold it."""
    try:  # a file's train_batch_size may set it
        global_size = load(overrides).batch.global_size
    except ConfigError:  # a refusal at the default cluster (a file's num_processes): each shape reports its own
        global_size = compose(overrides).batch.global_size
    if not global_size:
        raise ConfigError(["trl-ds plan --need compares cluster shapes at one global batch: set batch.global_size "
                           "(e.g. batch.global_size=64)."])
    kept = [n for n in counts if global_size % n == 0]
    skipped = [(n, f"batch.global_size={global_size} " + (f"has fewer samples than {n} GPUs" if n > global_size else
                                                            f"does not divide over {n} GPUs")) for n in counts
               if global_size % n]
    if not kept:
        raise ConfigError([f"batch.global_size={global_size} divides over none of --counts "
                           f"{','.join(map(str, counts))}: use a multiple of one of them (e.g. "
                           f"batch.global_size={counts[0] * 8}), or name counts that divide it."])
    return kept, skipped


@dataclass
class Answer:
    fitting: List[Shape]  # cheapest first, the smallest marked
    misfits: List[Shape]
    skipped: List[Tuple[int, str]]  # GPU counts that cannot hold the global batch, and why


def need(overrides: Sequence[str], gpus: Sequence[str], counts: Sequence[int], tokens: Optional[float] = None,
         row_check: RowCheckFactory = None, load: Load = compose, from_files: Sequence[str] = ()) -> Answer:
    """The shapes that fit and those that do not, over the counts that can hold the global batch. row_check(cfg): the
    launch's check of a shape's candidates (trl_ds/check/plan_rows.py RowCheck), so no shape is fitted with a config
    it refuses; load: each shape's overrides to its config (the command passes the one resolve: the user's files);
    from_files: the keys those files set, which stay as the files set them."""
    kept, skipped = usable_counts(overrides, counts, load)
    shapes = [fit_shape(overrides, g, memory_of(g), n, tokens, row_check, load, from_files)
              for g in gpus for n in kept]
    fitting = sorted((s for s in shapes if s.best), key=lambda s: (s.cost, s.gpus))
    if fitting:
        min(fitting, key=lambda s: (s.memory_gb * s.gpus, s.gpus)).smallest = True
    return Answer(fitting, [s for s in shapes if not s.best], skipped)


def memory_of(gpu: str) -> float:
    memory = read_preset(gpu).get("memory_gb") or 0
    if memory <= 0:
        raise ConfigError([f"--gpus {gpu}: the hardware file gives no memory_gb, so what fits is unknown. Add "
                           f"memory_gb: <GiB per GPU> to it."])
    return float(memory)


def render(answer: Answer, tokens_or_steps: str, only_fitting: bool = False) -> str:
    """The table of shapes that fit, then each one's run line; the counts skipped and (unless only_fitting) the
    shapes that do not fit, each with why."""
    head = ["", "gpu", "GPUs", "nodes", "GiB/rank", "host GiB/node", "s/step", "whole run", "GPU-hours",
            "fastest configuration that fits (overrides)"]  # last: the widest, and ragged
    rows = [["*" if s.smallest else "", s.gpu, str(s.gpus), str(s.nodes), size(s.best.estimate.device_total),
             size(s.best.estimate.host_total), f"{s.best.time.seconds:.3g}",
             duration(s.run.seconds) if s.run.steps else "?", f"{s.run.gpu_hours:.3g}" if s.run.steps else "?",
             " ".join(s.choices)] for s in answer.fitting]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i in (1, len(head) - 1) else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    lines = [f"trl_ds plan --need: {tokens_or_steps}; cheapest first (GPU-hours); * the smallest that fits", ""]
    lines += [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows] if rows else \
        ["nothing fits on any of these shapes."]
    lines += [""] + [f"run ({s.gpu} x{s.gpus}): {s.command}" for s in answer.fitting] if rows else []
    lines += [""] + [f"skipped: {n} GPUs: {why}" for n, why in answer.skipped] if answer.skipped else []
    misfits = [] if only_fitting else answer.misfits
    lines += [""] + [f"does not fit: {s.gpu} x{s.gpus}: {s.why_not}" for s in misfits] if misfits else []
    return "\n".join(lines)


def as_json(answer: Answer) -> dict:
    def row(s: Shape) -> dict:
        out = {"gpu": s.gpu, "memory_gb": s.memory_gb, "gpus": s.gpus, "nodes": s.nodes}
        if not s.best:
            return {**out, "fits": False, "why_not": s.why_not}
        e = s.best.estimate
        return {**out, "fits": True, "smallest": s.smallest, "configuration": s.best.label(), "overrides": s.choices,
                "command": s.command, "device_total_bytes": e.device_total, "host_total_bytes": e.host_total,
                "step_seconds": s.best.time.seconds, "seconds_per_sample": s.best.time.per_sample,
                "whole_run": s.run.as_json()}
    return {"fitting": [row(s) for s in answer.fitting], "not_fitting": [row(s) for s in answer.misfits],
            "skipped": [{"gpus": n, "why": why} for n, why in answer.skipped]}
