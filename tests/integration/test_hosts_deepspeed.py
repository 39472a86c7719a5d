"""The deepspeed launcher over ssh/pdsh across two test hosts with their own addresses (tests/integration/hosts.py).

Every rank records, from its own environment, the variables the config set (a sitecustomize on PYTHONPATH, which
the runner forwards), and the address of the host it runs on. A rank killed on node 1 must end the launch within
seconds, naming the rank, its node and its own log.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, read_json
from tests.integration.test_multinode import losses, reference_run, tiny_model_dir
from tests.integration.test_stop import processes_of, wait_for

pytestmark = pytest.mark.integration
RECORDED = ("GLOO_SOCKET_IFNAME", "MY_MARKER")
# Each rank: its environment's configured variables and its host's eth1 address; a rank named by
# TRL_DS_TEST_KILL_RANK kills itself (SIGKILL) once started, after noting when.
SITECUSTOMIZE = """
import json, os, signal, subprocess, time
rank = os.environ.get("RANK") if "LOCAL_RANK" in os.environ else os.environ.get("OMPI_COMM_WORLD_RANK")
if rank is not None:  # a rank: from DeepSpeed's per-node launch, or from mpirun
    addr = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth1"], capture_output=True, text=True).stdout.split()
    record = {{name: os.environ.get(name) for name in {names!r}}}
    record["address"] = addr[3].split("/")[0] if len(addr) > 3 else None
    with open(os.path.join({folder!r}, f"rank_{{rank}}.json"), "w") as f:
        json.dump(record, f)
    if os.environ.get("TRL_DS_TEST_KILL_RANK") == rank:
        with open(os.path.join({folder!r}, "killed_at"), "w") as f:
            f.write(str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
"""


def op_built_at(name):
    """When DeepSpeed's JIT-built op was last linked (torch's extension cache)."""
    from torch.utils.cpp_extension import _get_build_directory

    return (Path(_get_build_directory(name, verbose=False)) / f"{name}.so").stat().st_mtime_ns


def launch_on_node_0(test_hosts, tmp_path_factory, tmp_path, run_dir, extra, timeout=1200):
    """python -m trl_ds on node 0 (10.88.0.1), as a user there would type it; returns (CompletedProcess, records)."""
    records = tmp_path / "records"
    site = tmp_path / "site"
    for folder in (records, site):
        folder.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(names=RECORDED, folder=str(records)))
    hostfile = test_hosts.write_hostfile(tmp_path / "hosts.txt")
    args = ["launcher=deepspeed", "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.hostfile={hostfile}",
            f"cluster.master_addr={test_hosts.addresses[0]}", "+cluster.env.GLOO_SOCKET_IFNAME=eth1",
            "+launcher.env.MY_MARKER=hello", f"model.name_or_path={tiny_model_dir(tmp_path_factory)}",
            "launcher.rdzv_timeout=900", *extra, f"hydra.run.dir={run_dir}"]
    env = test_hosts.env(PYTHONPATH=f"{site}{os.pathsep}{REPO}")
    cmd = test_hosts.in_node(0, [sys.executable, "-m", "trl_ds", *args])
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    found = {int(p.stem.split("_")[1]): read_json(p) for p in records.glob("rank_*.json")}
    return done, found, records


def test_deepspeed_over_pdsh_carries_the_environment_and_trains_to_the_one_host_loss(test_hosts, tmp_path,
                                                                                    tmp_path_factory):
    reference = reference_run(tmp_path_factory)  # 1 node x 2 ranks, global batch 4, as here (2 nodes x 1 rank)
    run_dir = tmp_path / "run"
    built = op_built_at("deepspeed_shm_comm")  # by the reference run's ranks
    done, records, _ = launch_on_node_0(test_hosts, tmp_path_factory, tmp_path, run_dir, ["trainer.max_steps=3"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Ranks started over ssh have the login PATH, whose ninja (Debian's 1.11) is not the venv's: they rebuilt the op
    # (20 s), and the next local launch rebuilt it back, until the worker put its own Python's folder first.
    assert op_built_at("deepspeed_shm_comm") == built, "a rank rebuilt DeepSpeed's shm op"
    # Each rank saw every configured variable in its own environment, on its own host.
    assert records == {0: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.1"},
                       1: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.2"}}
    assert (run_dir / ".deepspeed_env").read_text() == "GLOO_SOCKET_IFNAME=eth1\nMY_MARKER=hello\n"
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["world_size"], summary["global_batch"]) == ("completed", 2, 4)
    # Constant learning rate: the first 3 steps of the 10-step reference are these 3 steps.
    assert losses(run_dir) == pytest.approx(reference["losses"][:3], abs=1e-6)
    for node in (0, 1):  # one folder per node, each holding its own rank's log
        assert [p.name.split("_")[-1] for p in (run_dir / "logs" / f"node_{node}").glob("*_rank*.log")] == [
            f"rank{node}.log"]


def test_rank_killed_on_node_1_ends_the_launch_within_seconds_naming_rank_node_and_log(test_hosts, tmp_path,
                                                                                       tmp_path_factory):
    run_dir = tmp_path / "run"
    done, records, folder = launch_on_node_0(test_hosts, tmp_path_factory, tmp_path, run_dir,
                                             ["+launcher.env.TRL_DS_TEST_KILL_RANK=1"], timeout=300)
    ended = time.time()
    assert done.returncode != 0
    assert records[1]["MY_MARKER"] == "hello"  # the kill switch itself travelled through .deepspeed_env
    took = ended - float((folder / "killed_at").read_text())
    assert took < 30, f"the launch ended {took:.0f} s after rank 1 died (launcher.rdzv_timeout is 900)"
    log = next((run_dir / "logs" / "node_1").glob("*_rank1.log"))
    assert (f"trl_ds: launch failed: rank 1 (node 1, host 10.88.0.2, local rank 0) exited with signal SIGKILL; "
            f"its log: {log}") in done.stderr, done.stderr[-3000:]
    assert read_json(run_dir / "logs" / "node_0" / "failure.json")["log"] == str(log)
    # the remote launchers' own exit after SIGTERM
    wait_for(lambda: not processes_of(run_dir), 20, "every launcher and rank of this run ended")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"


def test_deepspeed_over_openmpi_carries_the_environment_and_trains_to_the_one_host_loss(test_hosts, tmp_path,
                                                                                      tmp_path_factory):
    """mpirun (Debian's Open MPI) starts both ranks itself; root needs --allow-run-as-root, and Open MPI's own TCP
    traffic is kept on eth1 like gloo's. --bind-to none: both test hosts share this machine's two cores, and Open
    MPI's default for 2 processes binds each host's one rank to core 0, the same core."""
    reference = reference_run(tmp_path_factory)
    run_dir = tmp_path / "run"
    mpi_args = "--allow-run-as-root --bind-to none --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1"
    done, records, _ = launch_on_node_0(test_hosts, tmp_path_factory, tmp_path, run_dir, [
        "trainer.max_steps=3", "launcher.multinode_runner=openmpi", f"launcher.launcher_args='{mpi_args}'"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "mpirun -n 2 -hostfile" in (run_dir / "logs" / "node_0" / "launcher.log").read_text()
    # mpirun starts the ranks without launch.sh, so with no OMP_NUM_THREADS: each took its share of its host's cores
    # (one rank per host here), as launch.sh gives the ranks it starts.
    share = str(len(os.sched_getaffinity(0)))
    for rank in (0, 1):
        assert read_json(run_dir / "memory" / f"rank_{rank}.json")["threads"] == {"OMP_NUM_THREADS": share,
                                                                                  "torch": int(share)}
    assert records == {0: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.1"},
                       1: {"GLOO_SOCKET_IFNAME": "eth1", "MY_MARKER": "hello", "address": "10.88.0.2"}}
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["world_size"], summary["global_batch"]) == ("completed", 2, 4)
    assert losses(run_dir) == pytest.approx(reference["losses"][:3], abs=1e-6)


def test_rank_killed_on_node_1_ends_an_openmpi_launch_naming_rank_node_and_log(test_hosts, tmp_path, tmp_path_factory):
    """mpirun ends every rank when one dies; trl_ds names the rank and its host from mpirun's report when mpirun
    gives one, and the log the output went to (mpirun gathers every rank's output into node 0's launcher.log)."""
    run_dir = tmp_path / "run"
    mpi_args = "--allow-run-as-root --bind-to none --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1"
    done, records, folder = launch_on_node_0(test_hosts, tmp_path_factory, tmp_path, run_dir, [
        "launcher.multinode_runner=openmpi", f"launcher.launcher_args='{mpi_args}'",
        "+launcher.env.TRL_DS_TEST_KILL_RANK=1"], timeout=300)
    ended = time.time()
    assert done.returncode != 0
    took = ended - float((folder / "killed_at").read_text())
    assert took < 30, f"the launch ended {took:.0f} s after rank 1 died (launcher.rdzv_timeout is 900)"
    log = run_dir / "logs" / "node_0" / "launcher.log"
    named = f"rank 1 (node 1, host 10.88.0.2) exited with signal SIGKILL; its output is in {log}"
    # Open MPI 4.1 loses its report of the rank at times (tests/unit/launch/test_launch_multihost.py has both texts).
    lost = (f"a rank that mpirun started failed and mpirun ended the job (exit code 137); Open MPI left out which "
            f"rank this time; the ranks' output is in {log}")
    reported = "process rank 1 with PID" in log.read_text()
    assert f"trl_ds: launch failed: {named if reported else lost}" in done.stderr, done.stderr[-3000:]
    wait_for(lambda: not processes_of(run_dir), 20, "every launcher and rank of this run ended")
