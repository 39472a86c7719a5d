"""torchrun's c10d rendezvous and its elastic node range (launcher.rdzv_backend, launcher.min_nodes)."""
import math
from typing import List

from trl_ds.config.batch import Batch
from trl_ds.config.values import elastic_min_nodes, sp_size, value
from trl_ds.launch.launchers import launcher_of


def check_rendezvous(cfg) -> List[str]:
    launcher, nodes = cfg.launcher, cfg.cluster.nodes
    c10d = value(launcher.rdzv_backend) == "c10d"
    problems = []
    if c10d and not launcher_of(cfg).c10d:
        problems.append("launcher.rdzv_backend=c10d is torchrun's rendezvous; the deepspeed launcher has none. Use "
                        "launcher=torchrun, or drop launcher.rdzv_backend.")
    if launcher.last_call_s < 0:
        problems.append(f"launcher.last_call_s={launcher.last_call_s} must be 0 or more (seconds), e.g. "
                        f"launcher.last_call_s=30.")
    low = launcher.min_nodes
    if low is None:
        return problems
    if not c10d:
        problems.append(f"launcher.min_nodes={low} needs torchrun's elastic rendezvous. Add "
                        f"launcher.rdzv_backend=c10d, or drop launcher.min_nodes.")
    elif not 1 <= low <= nodes:
        problems.append(f"launcher.min_nodes={low} is outside 1..{nodes} (cluster.nodes={nodes}). Use a value in "
                        f"that range, e.g. launcher.min_nodes={max(1, nodes // 2)}.")
    return problems


def check_elastic_batch(cfg, batch: Batch) -> List[str]:
    """Each node count the launch may start with must split the global batch into whole micro-batches per rank:
    fewer nodes accumulate more steps (worker/elastic.py), so the global batch, and the loss curve, stay the same."""
    low, nodes = elastic_min_nodes(cfg), cfg.cluster.nodes
    if low is None:
        return []
    # Sequence-parallel ranks share their samples: only data-parallel ranks multiply the batch.
    per_step = {n: batch.micro * (n * cfg.cluster.gpus_per_node // sp_size(cfg)) for n in range(low, nodes + 1)}
    wrong = [n for n, size in per_step.items() if batch.global_size % size]
    if not wrong:
        return []
    step = math.lcm(*per_step.values())
    fits = [m for m in range(low, nodes + 1) if all(batch.global_size % per_step[n] == 0 for n in range(m, nodes + 1))]
    fix = f"batch.global_size={max(step, round(batch.global_size / step) * step)}"
    fix += f" or launcher.min_nodes={fits[0]}" if fits else ""
    return [f"launcher.min_nodes={low}: with {', '.join(map(str, wrong))} node(s) the global batch "
            f"{batch.global_size} is not a whole number of steps of micro-batch {batch.micro} on every rank "
            f"({', '.join(str(per_step[n]) for n in wrong)} samples per step). Set {fix}."]

