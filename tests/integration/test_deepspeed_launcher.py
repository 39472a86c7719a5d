"""The deepspeed launcher for real on CPU: one node from a `localhost slots=2` hostfile, and two nodes with --no_ssh
(two launcher processes, each starting its own share), both against the single-node torchrun run's loss."""
import pytest

from tests.conftest import read_json, run_app
from tests.integration.test_multinode import finish, free_port, losses, reference_run, start_node, tiny_model_dir

pytestmark = pytest.mark.integration


def test_single_node_from_the_shipped_localhost_hostfile(tmp_path_factory, tmp_path):
    reference = reference_run(tmp_path_factory)
    # DeepSpeed has no --standalone: a free port keeps it clear of other runs on this machine.
    out = run_app(["launcher=deepspeed", "cluster.hostfile=hostfiles/local.txt", f"cluster.master_port={free_port()}",
                   f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert (tmp_path / "hostfile").read_text().splitlines()[1:] == ["localhost slots=2"]
    summary = read_json(tmp_path / "summary.json")
    assert (summary["status"], summary["world_size"]) == ("completed", 2)
    assert losses(tmp_path) == pytest.approx(reference["losses"], abs=1e-6)
    assert sorted(p.name.split("_")[-1] for p in (tmp_path / "logs" / "node_0").glob("*_rank*.log")) == [
        "rank0.log", "rank1.log"]


def test_two_nodes_without_ssh(tmp_path_factory, tmp_path):
    reference = reference_run(tmp_path_factory)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# two 'nodes' on this machine\nlocalhost slots=1\n127.0.0.1 slots=1\n")
    args = ["launcher=deepspeed", "launcher.no_ssh=true", f"cluster.hostfile={hosts}", "cluster.nodes=2",
            "cluster.gpus_per_node=1", "cluster.master_addr=127.0.0.1", f"cluster.master_port={free_port()}",
            f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"]
    run_dir = tmp_path / "run"
    node0 = start_node(args + ["cluster.node_rank=0"], run_dir)
    node1 = start_node(args + ["cluster.node_rank=1"], run_dir)
    rc1, out1, err1, _ = finish(node1, 600)
    rc0, _, err0, _ = finish(node0, 600)
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    assert "node 1 done" in out1
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["world_size"]) == ("completed", 2)
    assert summary["final_loss"] == pytest.approx(reference["summary"]["final_loss"], abs=1e-6)
    assert list((run_dir / "logs" / "node_1").glob("*_rank1.log"))
