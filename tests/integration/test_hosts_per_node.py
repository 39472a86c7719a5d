"""One launcher per test host (tests/integration/hosts.py: 10.88.0.1 and 10.88.0.2, their own network namespaces):
torchrun's static and c10d rendezvous and the deepspeed launcher with launcher.no_ssh, each started on its host with
cluster.node_rank=N, as on a cluster without ssh between nodes. Each trains the tiny model to the one-host loss, and
every rank sees the configured variables in its own environment (the sitecustomize of test_hosts_deepspeed).
A rank killed on host 1 as it starts, before the process group forms, ends both hosts within seconds, naming the rank,
its node and its log (summary.json names that log too). These replace the loopback runs of the same trainings and
failures: the traffic here crosses hosts with their own addresses."""
import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, read_json
from tests.integration.test_hosts_deepspeed import RECORDED, SITECUSTOMIZE
from tests.integration.test_multinode import finish, losses, reference_run, tiny_model_dir

pytestmark = pytest.mark.integration
LAUNCHERS = {"torchrun": ["launcher=torchrun"], "torchrun-c10d": ["launcher=torchrun", "launcher.rdzv_backend=c10d"],
             "deepspeed-no-ssh": ["launcher=deepspeed", "launcher.no_ssh=true"]}
RANK_0_ON = {"torchrun-c10d": "the node torch ranked first (c10d)"}  # else node 0
PORT = 29611  # each host has its own network stack: nothing else listens on 10.88.0.1


def start_per_host(launcher, test_hosts, tmp_path, tmp_path_factory, extra=()):
    """Both hosts' launchers started at once; (node processes, run dir, records folder)."""
    run_dir, records, site = tmp_path / "run", tmp_path / "records", tmp_path / "site"
    for folder in (records, site):
        folder.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(names=RECORDED, folder=str(records)))
    hostfile = [f"cluster.hostfile={test_hosts.write_hostfile(tmp_path / 'hosts.txt')}"]  # deepspeed's only
    args = [*LAUNCHERS[launcher], *(hostfile if launcher.startswith("deepspeed") else []), "cluster.nodes=2",
            "cluster.gpus_per_node=1", f"cluster.master_addr={test_hosts.addresses[0]}", f"cluster.master_port={PORT}",
            "+cluster.env.GLOO_SOCKET_IFNAME=eth1", "+launcher.env.MY_MARKER=hello", "launcher.rdzv_timeout=300",
            f"model.name_or_path={tiny_model_dir(tmp_path_factory)}", "trainer.max_steps=3", *extra,
            f"hydra.run.dir={run_dir}"]
    env = test_hosts.env(PYTHONPATH=f"{site}{os.pathsep}{REPO}")
    nodes = [subprocess.Popen(test_hosts.in_node(n, [sys.executable, "-m", "trl_ds", *args, f"cluster.node_rank={n}"]),
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (0, 1)]
    return nodes, run_dir, records


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_one_launcher_per_host_trains_to_the_one_host_loss(launcher, test_hosts, tmp_path, tmp_path_factory):
    reference = reference_run(tmp_path_factory)  # 1 node x 2 ranks, global batch 4, as here (2 nodes x 1 rank)
    nodes, run_dir, records = start_per_host(launcher, test_hosts, tmp_path, tmp_path_factory)
    rc1, out1, err1, _ = finish(nodes[1], 600)
    rc0, _, err0, _ = finish(nodes[0], 600)
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    assert f"node 1 done; rank 0 on {RANK_0_ON.get(launcher, 'node 0')} writes summary.json" in out1
    found = {int(p.stem.split("_")[1]): read_json(p) for p in records.glob("rank_*.json")}
    assert found == {0: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.1"},
                     1: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.2"}}
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["world_size"], summary["global_batch"]) == ("completed", 2, 4)
    # Constant learning rate: the first 3 steps of the 10-step reference are these 3 steps.
    assert losses(run_dir) == pytest.approx(reference["losses"][:3], abs=1e-6)
    for node in (0, 1):  # each node's rank logs apart, though both ranks are local rank 0
        assert list((run_dir / "logs" / f"node_{node}").rglob("*.log"))


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_rank_killed_on_host_1_ends_both_hosts_naming_rank_node_and_log(launcher, test_hosts, tmp_path,
                                                                        tmp_path_factory):
    """Rank 1 dies as it starts, before the process group forms: node 0's ranks would wait for it until the
    process-group timeout. Node 1's launcher tells node 0's through the main store (torchrun's rendezvous store,
    or with no_ssh the one rank 0 serves, which appears only once rank 0 has imported its packages)."""
    nodes, run_dir, records = start_per_host(launcher, test_hosts, tmp_path, tmp_path_factory,
                                             ["+launcher.env.TRL_DS_TEST_KILL_RANK=1"])
    rc1, _, err1, _ = finish(nodes[1], 300)
    rc0, _, err0, _ = finish(nodes[0], 300)
    ended = time.time()
    assert rc0 != 0 and rc1 != 0
    took = ended - float((records / "killed_at").read_text())
    assert took < 30, f"the launch ended {took:.0f} s after rank 1 died (launcher.rdzv_timeout is 300)"
    said = re.search(r"trl_ds: launch failed: rank 1 \(node 1, local rank 0\) exited with signal SIGKILL; its log: "
                     r"(\S+)", err1)
    assert said, err1[-3000:]
    assert said.group(1).startswith(str(run_dir / "logs" / "node_1")) and os.path.exists(said.group(1))
    assert (f"trl_ds: launch failed: node 0 stopped its ranks because node 1 failed: rank 1 (node 1, local rank 0) "
            f"exited with signal SIGKILL; its log: {said.group(1)}") in err0, err0[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["log"]) == ("failed", said.group(1))
