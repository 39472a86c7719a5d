"""The deepspeed launcher for real on CPU: one node from a `localhost slots=2` hostfile, and two nodes with --no_ssh
(two launcher processes, each starting its own share), both against the single-node torchrun run's loss.

DeepSpeed's launcher has no rendezvous deadline of its own (its ranks would wait DEEPSPEED_TIMEOUT, 10 minutes, in
the process group): a node started alone must end within launcher.rdzv_timeout, naming the missing node, and leave
no rank behind.
"""
import glob
import os

import pytest

from tests.conftest import read_json, run_app
from tests.integration.test_multinode import (
    RDZV_TIMEOUT,
    SLACK_S,
    finish,
    free_port,
    losses,
    reference_run,
    start_node,
    tiny_model_dir,
)
from tests.integration.test_stop import processes_of

pytestmark = pytest.mark.integration


def test_single_node_from_the_shipped_localhost_hostfile(tmp_path_factory, tmp_path):
    reference = reference_run(tmp_path_factory)
    # DeepSpeed has no --standalone: a free port keeps it clear of other runs on this machine.
    port = free_port()
    out = run_app(["launcher=deepspeed", "cluster.hostfile=hostfiles/local.txt", f"cluster.master_port={port}",
                   f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert (tmp_path / "hostfile").read_text().splitlines()[1:] == ["localhost slots=2"]
    summary = read_json(tmp_path / "summary.json")
    assert (summary["status"], summary["world_size"]) == ("completed", 2)
    assert losses(tmp_path) == pytest.approx(reference["losses"], abs=1e-6)
    assert sorted(p.name.split("_")[-1] for p in (tmp_path / "logs" / "node_0").glob("*_rank*.log")) == [
        "rank0.log", "rank1.log"]
    # DeepSpeed's launcher sets LOCAL_SIZE, so its CPU all-reduce gave each rank a /dev/shm buffer (66 MB) that it
    # never unlinks: each rank did (trl_ds/worker/shm_buffers.py)
    assert glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*") == []


def two_node_args(tmp_path_factory, tmp_path, port, timeout=900):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# two 'nodes' on this machine\nlocalhost slots=1\n127.0.0.1 slots=1\n")
    return ["launcher=deepspeed", "launcher.no_ssh=true", f"cluster.hostfile={hosts}", "cluster.nodes=2",
            "cluster.gpus_per_node=1", "cluster.master_addr=127.0.0.1", f"cluster.master_port={port}",
            f"launcher.rdzv_timeout={timeout}", f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"]


@pytest.mark.light
@pytest.mark.xdist_group("waits")  # one worker waits through them while the other runs the unit tests
@pytest.mark.parametrize("node_rank, expected", [
    (0, "node 1 never joined: the rendezvous at 127.0.0.1:{port} was not complete within "
        "launcher.rdzv_timeout={timeout} s. Start every node"),
    (1, "node 1 never joined: the main node's rendezvous at 127.0.0.1:{port} did not answer (is node 0 started, and "
        "does that address reach it from here?) within launcher.rdzv_timeout={timeout} s."),
])
def test_node_started_alone_ends_within_the_timeout_naming_the_missing_node(tmp_path_factory, tmp_path, node_rank,
                                                                            expected):
    port = free_port()
    run_dir = tmp_path / "run"
    args = two_node_args(tmp_path_factory, tmp_path, port, RDZV_TIMEOUT) + [f"cluster.node_rank={node_rank}"]
    node = start_node(args, run_dir)
    rc, _, err, took = finish(node, RDZV_TIMEOUT + 120)
    assert rc != 0
    assert took < RDZV_TIMEOUT + SLACK_S
    assert f"trl_ds: launch failed: {expected.format(port=port, timeout=RDZV_TIMEOUT)}" in err, err[-3000:]
    assert not processes_of(run_dir), "deepspeed's launch or a rank outlived the launch"
    assert read_json(run_dir / "logs" / f"node_{node_rank}" / "failure.json")["node"] == node_rank
