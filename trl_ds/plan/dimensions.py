"""The dimensions auto-fit and the plan grid vary beyond stage × offload × checkpointing × micro-batch, when asked:
the tensor-parallel size (`tp=auto`: none, or AutoTP over 2, 4, ... ranks), the Ulysses size (`sp=auto`) and the
offload ratio (`offload=auto`). Each tp × sp pair is a base Setup of its own (AutoTP changes the layers a rank holds,
Ulysses its tokens), counted from a copy of the config with that pair set, as a typed override would set it.

Sizes tried: every divisor of the world from 2 up, within one node (a group across nodes would put each layer's
collectives on the network). Which of them the launch accepts (heads divisible by tp, no ZeRO-3 under AutoTP, no tp
with sp, sft only, ...) is the launch's check's answer (trl_ds/check/plan_rows.py RowCheck), never a copy here.
"""
import copy
from typing import Iterator, List, Tuple

from trl_ds.config.topology import topology
from trl_ds.config.values import value
from trl_ds.plan.memory import Setup, setup_from_config

TP, SP = "tp", "sp"  # the auto choices' names (auto-fit's labels and plan.json)


def is_auto(cfg, group: str) -> bool:
    return bool(cfg[group].get("auto", False))


def sizes(cfg, group: str) -> List[int]:
    """1, then each divisor of the world within a node, when `group=auto`; else the size in force."""
    topo = topology(cfg)
    if not is_auto(cfg, group):
        return [topo.tp_size if group == TP else topo.sp_size]
    return [1] + [n for n in range(2, min(topo.world, topo.gpus_per_node) + 1) if topo.world % n == 0]


def set_sizes(cfg, tp: int, sp: int) -> None:
    """Set tp and sp as `tp=autotp tp.size=N` / `sp=ulysses sp.size=N` (or `tp=none` / `sp=none` at 1) would."""
    cfg.tp.name, cfg.tp.size = ("autotp", tp) if tp > 1 else ("none", 1)
    if sp > 1:
        cfg.sp.name, cfg.sp.size = "ulysses", sp
    elif value(cfg.sp.name) != "none" or cfg.sp.size != 1:
        cfg.sp.name, cfg.sp.size = "none", 1


def bases(cfg) -> Iterator[Tuple[int, int, Setup]]:
    """(tp, sp, base Setup) for each pair tried; the config's own Setup when neither group is `auto`."""
    if not (is_auto(cfg, TP) or is_auto(cfg, SP)):
        yield topology(cfg).tp_size, topology(cfg).sp_size, setup_from_config(cfg)
        return
    for tp in sizes(cfg, TP):
        for sp in sizes(cfg, SP):
            if tp > 1 and sp > 1:
                continue  # the check refuses AutoTP with Ulysses; no need to count the pair
            pair = copy.deepcopy(cfg)
            set_sizes(pair, tp, sp)
            yield tp, sp, setup_from_config(pair)


def auto_groups(cfg) -> List[str]:
    """tp and sp, where `auto`."""
    return [group for group in (TP, SP) if is_auto(cfg, group)]
