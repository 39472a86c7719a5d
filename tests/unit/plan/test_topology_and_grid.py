"""One topology object (world, data-parallel world, sp size) and one ZeRO × offload rule shared by checks and grid."""
import pytest

from trl_ds.config.topology import Topology, topology
from trl_ds.config.zero_offload import zero_offload_problems
from trl_ds.plan.grid import OFFLOADS, setups, valid
from trl_ds.plan.memory import setup_from_config


def test_topology_counts_ranks_and_data_parallel_ranks(compose_cfg):
    assert (Topology(2, 8).world, Topology(2, 8).data_parallel) == (16, 16)
    assert (Topology(2, 8, sp_size=4).world, Topology(2, 8, sp_size=4).data_parallel) == (16, 4)
    cfg = compose_cfg(["cluster=2x8", "sp=ulysses", "sp.size=4", "zero=stage3"])
    assert topology(cfg) == Topology(nodes=2, gpus_per_node=8, sp_size=4)
    assert setup_from_config(cfg).topology == topology(cfg)  # the estimate sees the same dimensions
    assert topology(compose_cfg([])) == Topology(nodes=1, gpus_per_node=2, sp_size=1)  # sp=none: sp.size ignored


# Which (stage, offload) the grid may try, written out by hand from DeepSpeed's rules: the optimizer can leave the
# device from stage 1, parameters (and NVMe) only under stage 3.
ALLOWED = {(0, "none"), (1, "none"), (2, "none"), (3, "none"), (1, "opt-cpu"), (2, "opt-cpu"), (3, "opt-cpu"),
           (3, "opt+param-cpu"), (3, "nvme")}


@pytest.mark.parametrize("stage", range(4))
@pytest.mark.parametrize("offload", list(OFFLOADS))
def test_grid_and_checks_share_one_zero_offload_rule(stage, offload):
    assert valid(stage, offload) == ((stage, offload) in ALLOWED)
    assert (zero_offload_problems(stage, *OFFLOADS[offload]) == []) == ((stage, offload) in ALLOWED)


def test_grid_points_are_the_valid_products(compose_cfg):
    base = setup_from_config(compose_cfg([]))
    points = list(setups(base, micros=[1, 2]))
    assert len(points) == len(ALLOWED) * 2 * 2  # × checkpointing off/on × two micro-batches
    assert {(s.stage, s.optimizer_offload, s.param_offload) for s in points} == {
        (stage, *OFFLOADS[name]) for stage, name in ALLOWED}
