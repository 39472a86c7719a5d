"""The parallel dimensions of a run, in one object: nodes × ranks per node = world; sequence-parallel ranks share
a sample, so the data-parallel world (the ranks that read different samples) is world / sp size."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    nodes: int
    gpus_per_node: int  # ranks per node (CPU processes when cluster.device=cpu)
    sp_size: int = 1  # ranks sharing one sequence (Ulysses); 1 without sequence parallelism

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        """Ranks that read different samples; at least 1 (an sp size above the world is a ConfigError elsewhere)."""
        return max(self.world // self.sp_size, 1)


def topology(cfg) -> Topology:
    """The run's topology from its cluster and sp groups; the cluster owns the world size."""
    sp = cfg.sp.size if _value(cfg.sp.name) != "none" else 1
    return Topology(nodes=cfg.cluster.nodes, gpus_per_node=cfg.cluster.gpus_per_node, sp_size=sp)


def _value(x):
    return getattr(x, "value", x)
