"""torchrun's c10d rendezvous: the checks before launch, the command each node runs, the accumulation an elastic
launch uses when fewer nodes joined, the failure channel's store, and the address a node publishes. Expected values
are worked out by hand in each test."""
import socket

import pytest

from tests.conftest import REPO
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError
from trl_ds.launch import build_commands
from trl_ds.launch.route import source_address
from trl_ds.worker.elastic import accumulation_for_world, fit_to_world

RUN = "/scratch/runs/r1"
ELASTIC = ["cluster.nodes=4", "cluster.gpus_per_node=2", "cluster.master_addr=10.0.0.1",
           "trainer.per_device_train_batch_size=2", "launcher.rdzv_backend=c10d"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def problems(compose_cfg, overrides):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(overrides), RUN, launching=False)
    return err.value.problems


def test_every_node_count_of_an_elastic_launch_must_split_the_global_batch(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    # 2, 3 or 4 nodes x 2 ranks x micro-batch 2 = 8, 12, 16 samples per step: 48 splits into each.
    assert validate(compose_cfg(ELASTIC + ["batch.global_size=48", "launcher.min_nodes=2"]), RUN,
                    launching=False).global_size == 48
    # 32 is 4 steps of 8 and 2 of 16, but 32/12 is not whole; lcm(8, 12, 16) = 48; from 4 nodes up only 16 remains.
    assert problems(compose_cfg, ELASTIC + ["batch.global_size=32", "launcher.min_nodes=2"]) == [
        "launcher.min_nodes=2: with 3 node(s) the global batch 32 is not a whole number of steps of micro-batch 2 on "
        "every rank (12 samples per step). Set batch.global_size=48 or launcher.min_nodes=4."]


def test_rendezvous_settings_are_checked(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    assert problems(compose_cfg, ELASTIC + ["launcher.min_nodes=5"]) == [
        "launcher.min_nodes=5 is outside 1..4 (cluster.nodes=4). Use a value in that range, e.g. launcher.min_nodes=2."]
    assert problems(compose_cfg, ELASTIC[:-1] + ["launcher.min_nodes=2"]) == [
        "launcher.min_nodes=2 needs torchrun's elastic rendezvous. Add launcher.rdzv_backend=c10d, or drop "
        "launcher.min_nodes."]
    assert problems(compose_cfg, ELASTIC + ["launcher.last_call_s=-1"]) == [
        "launcher.last_call_s=-1 must be 0 or more (seconds), e.g. launcher.last_call_s=30."]
    assert ("launcher.rdzv_backend=c10d is torchrun's rendezvous; the deepspeed launcher has none. Use "
            "launcher=torchrun, or drop launcher.rdzv_backend.") in problems(
        compose_cfg, ELASTIC + ["launcher=deepspeed", "launcher.no_ssh=true"])


def test_c10d_commands_host_the_store_on_node_0_only(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    cmds = build_commands(compose_cfg(ELASTIC + ["batch.global_size=48", "launcher.min_nodes=2"]), RUN)
    assert len(cmds) == 4
    for rank, cmd in enumerate(cmds):
        assert cmd[cmd.index("--nnodes") + 1] == "2:4"
        assert cmd[cmd.index("--rdzv_endpoint") + 1] == '"$MAIN_ADDR":29500'
        assert cmd[cmd.index("--rdzv_conf") + 1] == (f"is_host={int(rank == 0)},join_timeout=900,read_timeout=900,"
                                                     f"last_call_timeout=30")
        assert "--node_rank" not in cmd  # c10d ranks the nodes itself
        assert cmd[cmd.index("--log_dir") + 1] == f"{RUN}/logs/node_{rank}"
    assert len({cmd[cmd.index("--rdzv_id") + 1] for cmd in cmds}) == 1


def test_fewer_ranks_accumulate_more_to_keep_the_global_batch():
    ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 16}
    assert accumulation_for_world(ds, planned_world=8, world=8) is None
    assert accumulation_for_world(ds, planned_world=8, world=4) == 2  # 16 = 2 x 4 x 2
    assert accumulation_for_world(ds, planned_world=8, world=2) == 4
    # Sequence parallel 2: 8 ranks are 4 data-parallel ranks (global 8); 4 ranks are 2, so 2 steps of 4.
    ulysses = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "sequence_parallel_size": 2}
    assert accumulation_for_world(ulysses, planned_world=8, world=4) == 2
    args = {"gradient_accumulation_steps": 1}
    line = fit_to_world(args, ds, planned_world=8, world=4)
    assert args["gradient_accumulation_steps"] == ds["gradient_accumulation_steps"] == 2
    assert ds["train_batch_size"] == 16
    assert line == ("trl_ds: 4 of 8 planned ranks joined (launcher.min_nodes): accumulating 2 micro-batches per step "
                    "instead of 1 keeps the global batch")


def test_a_node_publishes_its_address_on_the_route_to_the_main_node():
    assert source_address("127.0.0.1") == "127.0.0.1"
    with pytest.raises(OSError):
        source_address("no-such-host.invalid")


def test_the_fewest_nodes_an_elastic_launch_may_start_with_must_fit(compose_cfg, monkeypatch):
    """llama3-70b, ZeRO-3, 4 nodes x 8 GPUs: its ~1.1 TB of model states (16 bytes per parameter) split over 32
    ranks fit 70 GiB (60.2 estimated); over 24 (3 nodes: 73.9) they do not, over 16 (2 nodes: 101.3) they are twice as
    large per rank. The preflight refuses a launch that may start on too few nodes, naming the fewest that fit."""
    from trl_ds.cli.app import build

    monkeypatch.chdir(REPO)
    base = ["model=llama3-70b", "cluster=4x8", "zero=stage3", "batch.global_size=192", "launcher.rdzv_backend=c10d"]
    seventy = ["cluster.gpu_memory_gb=70"]
    assert build(compose_cfg(base + seventy + ["launcher.min_nodes=4"]), RUN, launching=False).memory_warning is None
    with pytest.raises(ConfigError) as err:
        build(compose_cfg(base + ["launcher.min_nodes=2", "cluster.gpu_memory_gb=100"]), RUN, launching=True)
    (line,) = err.value.problems
    assert line.startswith("launcher.min_nodes=2: the run may start on 2 of cluster.nodes=4 nodes, where each rank "
                           "holds larger ZeRO shards: estimated ")
    assert line.endswith("> cluster.gpu_memory_gb=100. Set launcher.min_nodes=3, the fewest nodes that fit. Or set "
                         "preflight.memory=warn to launch anyway."), line
    warned = build(compose_cfg(base + seventy + ["launcher.min_nodes=3"]), RUN, launching=False).memory_warning
    assert warned.endswith("> cluster.gpu_memory_gb=70. Only every node fits: drop launcher.min_nodes."), warned
