"""The grid of training configurations: ZeRO stage × offload × micro-batch × gradient checkpointing, and the partial
offload ratios (offload=auto). The planner tabulates it, auto-fit searches what its `auto` choices leave open; both
skip what the checks would reject (config/zero_offload.py).
"""
from dataclasses import replace
from typing import Iterable, Iterator, List, Optional

from trl_ds.config.zero_offload import zero_offload_problems
from trl_ds.plan.memory import Setup
from trl_ds.plan.optimizer_places import RATIOS, auto_sub_group_size

# The offload settings the grid tries, by the name the planner shows: (optimizer device, parameter device).
OFFLOADS = {"none": ("none", "none"), "opt-cpu": ("cpu", "none"), "opt+param-cpu": ("cpu", "cpu"),
            "nvme": ("nvme", "nvme")}
OFFLOAD_OVERRIDES = {"none": ["offload=none"], "opt-cpu": ["offload=cpu"],
                     "opt+param-cpu": ["offload=cpu", "offload.param=cpu"], "nvme": ["offload=nvme"]}
MICRO_BATCHES = (1, 2, 4, 8, 16)


def offload_overrides(s: Setup, keyed: bool = False) -> List[str]:
    """The overrides that select a row's offload. keyed: by key (offload.optimizer=, offload.param=), which win over
    a file the user brings where the group choice (offload=cpu) does not (check/imported.py given_by_name). A layout
    outside the grid's four (parameters offloaded alone, which DeepSpeed accepts at ZeRO-3) is named by key too."""
    name = offload_name(s)
    if keyed or name not in OFFLOAD_OVERRIDES:
        return [f"offload.optimizer={s.optimizer_offload}", f"offload.param={s.param_offload}"]
    return list(OFFLOAD_OVERRIDES[name])
STAGES = (0, 1, 2, 3)
CHECKPOINTING = (False, True)


def offload_name(s: Setup) -> str:
    pair = (s.optimizer_offload, s.param_offload)
    return next((name for name, devices in OFFLOADS.items() if devices == pair), f"{pair[0]}/{pair[1]}")


def valid(stage: int, offload: str) -> bool:
    """A combination the checks accept."""
    return not zero_offload_problems(stage, *OFFLOADS[offload])


def quantized_allows(base: Setup, offload: str) -> bool:
    """A quantized base keeps its parameters on the device (trl_ds/check/quantization.py)."""
    return not base.quant_bits or OFFLOADS[offload][1] == "none"


def micro_batches(base: Setup, global_size: Optional[int]) -> List[int]:
    choices = sorted(set(MICRO_BATCHES) | {base.micro_batch})
    if global_size:  # only micro-batches that divide the fixed global batch over the data-parallel ranks
        choices = [m for m in choices if global_size % (m * base.data_parallel) == 0] or [base.micro_batch]
    return choices


def setups(base: Setup, micros: Iterable[int], stages: Iterable[int] = STAGES, offloads: Iterable[str] = OFFLOADS,
           checkpointing: Iterable[bool] = CHECKPOINTING) -> Iterator[Setup]:
    """Every valid point of the grid, varied from `base`: stage, then offload, then checkpointing, then micro-batch."""
    # tp=autotp does not load under ZeRO-3 (trl_ds/check/tensor_parallel.py), so neither row nor choice has it
    for stage in (st for st in stages if base.tp_size == 1 or st != 3):
        for name in (n for n in offloads if n in OFFLOADS and valid(stage, n) and quantized_allows(base, n)):
            optimizer, param = OFFLOADS[name]
            for ckpt in checkpointing:
                for micro in micros:
                    yield replace(base, stage=stage, optimizer_offload=optimizer, param_offload=param,
                                  gradient_checkpointing=ckpt, micro_batch=micro)


def with_ratios(grid: Iterable[Setup]) -> Iterator[Setup]:
    """Each ZeRO-3 optimizer-only CPU offload, then the same with each partial ratio (offload=auto)."""
    for setup in grid:
        yield setup
        if setup.stage == 3 and (setup.optimizer_offload, setup.param_offload) == ("cpu", "none"):
            for ratio in RATIOS:
                yield partial(setup, ratio)


def partial(setup: Setup, ratio: float) -> Setup:
    return replace(setup, offload_ratio=ratio, sub_group_size=auto_sub_group_size(setup))
