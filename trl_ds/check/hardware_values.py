"""Values that cannot describe the hardware: refused before anything is planned against them (a GPU cluster's
cluster.gpu_memory_gb of 0 or less would be judged against host RAM; a host with no RAM fits nothing). No torch.
"""
from typing import List


def check_hardware_values(cfg) -> List[str]:
    c = cfg.cluster
    problems = []
    if str(getattr(c.device, "value", c.device)) == "cuda" and c.gpu_memory_gb <= 0:
        problems.append(f"cluster.gpu_memory_gb={c.gpu_memory_gb:g} cannot be a GPU's memory (cluster.device=cuda): "
                        f"give GiB per GPU, e.g. cluster.gpu_memory_gb=80, or cluster.device=cpu for CPU ranks.")
    if c.cpu_memory_gb <= 0:
        problems.append(f"cluster.cpu_memory_gb={c.cpu_memory_gb:g} cannot be a node's host RAM: give GiB per node, "
                        f"e.g. cluster.cpu_memory_gb=512.")
    return problems
