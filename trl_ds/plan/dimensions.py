"""The dimensions auto-fit and the plan grid vary beyond stage × offload × checkpointing × micro-batch, when asked: the
tensor-parallel size (`tp=auto`), the Ulysses size (`sp=auto`), the offload ratio (`offload=auto`) and, under bf16,
16-bit master weights and optimizer states (`precision.bf16_optimizer_auto=true`, apart since they change numerics).
Each tp × sp pair is a base Setup of its own. Sizes tried: every divisor of the world from 2 up, within one node;
which ones the launch accepts is the launch's check's answer (trl_ds/check/plan_rows.py RowCheck)."""
import copy
from dataclasses import replace
from typing import Iterator, List

from trl_ds.config.topology import topology
from trl_ds.config.values import dtype, value
from trl_ds.plan.memory import Setup, setup_from_config

TP, SP, OPT16 = "tp", "sp", "precision.bf16_optimizer_auto"  # the auto choices' names (labels and plan.json)
# (bf16_master_weights_and_grads, bf16_optimizer_states) pairs DeepSpeed has (check/deepspeed_features.py)
OPT16_PAIRS = ((False, False), (True, False), (True, True))
OPT16_LABELS = {(False, False): "fp32", (True, False): "master", (True, True): "all"}


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


def bases(cfg) -> Iterator[Setup]:
    """A base Setup for each tp × sp pair and 16-bit option tried; the config's own Setup when none is `auto`."""
    for base in split_bases(cfg):
        if opt16_auto(cfg):
            yield from (replace(base, bf16_master=master, bf16_states=states) for master, states in OPT16_PAIRS)
        else:
            yield base


def split_bases(cfg) -> Iterator[Setup]:
    if not (is_auto(cfg, TP) or is_auto(cfg, SP)):
        yield setup_from_config(cfg)
        return
    for tp in sizes(cfg, TP):
        for sp in sizes(cfg, SP):  # AutoTP with Ulysses too: the launch's check, not this loop, refuses them
            pair = copy.deepcopy(cfg)
            set_sizes(pair, tp, sp)
            yield setup_from_config(pair)


def opt16_auto(cfg) -> bool:
    """precision.bf16_optimizer_auto=true under bf16 (the options exist only in DeepSpeed's bf16 block)."""
    return bool(cfg.precision.get("bf16_optimizer_auto", False)) and dtype(cfg) == "bf16"


def opt16_label(s: Setup) -> str:
    return OPT16_LABELS.get((s.bf16_master, s.bf16_states), "states")


def auto_groups(cfg) -> List[str]:
    """tp, sp and the 16-bit options, where `auto`."""
    return [group for group in (TP, SP) if is_auto(cfg, group)] + ([OPT16] if opt16_auto(cfg) else [])
