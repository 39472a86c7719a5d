"""A user's own train.py (tests/integration/user_train.py) across the two test hosts (tests/integration/hosts.py), and
its run dir resumed after a kill: one run dir, started with the deepspeed launcher over pdsh from node 0, rank 1 killed
on node 1 after the first complete checkpoint, then relaunched with one torchrun per host, which resumes from that
checkpoint and trains to the end. The steps of both launches equal the one-host worker's (same settings: the script's
losses equal the worker's to the last bit, test_user_script.py), so the resume changed nothing.
(Its SLURM job: test_slurm.py::test_submitted_job_trains_across_both_nodes.)"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, read_json
from tests.integration.test_hosts_deepspeed import RECORDED, SITECUSTOMIZE
from tests.integration.test_multinode import finish, reference_run, tiny_model_dir
from tests.integration.test_resume import complete_steps, rank_pid
from tests.integration.user_train import user_train_py

pytestmark = pytest.mark.integration
STEPS, EVERY = 10, 4  # the reference run's 10 steps (constant learning rate, global batch 4)
PORT = 29613  # torchrun's rendezvous on 10.88.0.1, inside the test hosts' own network


@pytest.fixture(scope="module")
def user_run(test_hosts, tmp_path_factory):
    """(run dir, common overrides, environment, folder of each rank's records) for both launches of the run dir."""
    folder = tmp_path_factory.mktemp("user_script_hosts")
    site = folder / "site"
    records = folder / "records"
    for path in (site, records):
        path.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(names=RECORDED, folder=str(records)))
    model = tiny_model_dir(tmp_path_factory)
    args = [f"script={user_train_py(tmp_path_factory)}", f"script_args=[--model,{model}]",
            f"model.name_or_path={model}", f"trainer.max_steps={STEPS}", f"checkpoint.every_steps={EVERY}",
            "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.master_addr={test_hosts.addresses[0]}",
            "+cluster.env.GLOO_SOCKET_IFNAME=eth1", "launcher.rdzv_timeout=300", f"hydra.run.dir={folder / 'run'}"]
    return folder / "run", args, test_hosts.env(PYTHONPATH=f"{site}{os.pathsep}{REPO}"), records


def trained_rows(run_dir):
    """metrics.jsonl's training rows, the killed launch's steps that were trained again (marked superseded) left out,
    and a last line the kill may have cut."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return [row for row in rows if "loss" in row and not row.get("superseded")]


@pytest.fixture(scope="module")
def killed_over_pdsh(user_run, test_hosts, tmp_path_factory):
    """The deepspeed launcher on node 0 (pdsh to both hosts); rank 1 SIGKILLed on node 1 once checkpoint-4 is marked
    complete. Returns ((exit code, stdout, stderr), the newest complete checkpoint's step, each rank's record:
    its host's address, by the sitecustomize of test_hosts_deepspeed)."""
    run_dir, args, env, records = user_run
    hostfile = test_hosts.write_hostfile(run_dir.parent / "hosts.txt")
    cmd = test_hosts.in_node(0, [sys.executable, "-m", "trl_ds", "launcher=deepspeed",
                                 f"cluster.hostfile={hostfile}", *args])
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    killed = False
    while not killed and proc.poll() is None and time.monotonic() < deadline:
        pid = rank_pid(run_dir, 1) if complete_steps(run_dir) else None
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.02)
    rc, out, err, _ = finish(proc, 300)
    assert killed, f"rank 1 was never killed (launch exit code {rc}):\n{err[-3000:]}"
    return (rc, out, err), max(complete_steps(run_dir)), {n: read_json(records / f"rank_{n}.json") for n in (0, 1)}


def test_a_users_script_over_pdsh_trains_across_both_hosts_to_the_one_host_loss(killed_over_pdsh, user_run,
                                                                               tmp_path_factory):
    (rc, _, err), at, ranks = killed_over_pdsh
    run_dir = user_run[0]
    reference = reference_run(tmp_path_factory)["losses"]
    assert rc != 0 and "rank 1 (node 1, host 10.88.0.2, local rank 0) exited with signal SIGKILL" in err, err[-3000:]
    assert {n: r["address"] for n, r in ranks.items()} == {0: "10.88.0.1", 1: "10.88.0.2"}
    assert EVERY <= at < STEPS and at % EVERY == 0
    rows = trained_rows(run_dir)  # every step rank 0 logged before the kill, at least up to the checkpoint
    assert [row["step"] for row in rows] == list(range(1, len(rows) + 1)) and len(rows) >= at
    assert [row["loss"] for row in rows] == pytest.approx(reference[:len(rows)], abs=1e-6)
    assert read_json(run_dir / "summary.json")["status"] == "failed"


def test_its_run_dir_resumes_with_torchrun_per_host_to_the_uninterrupted_losses(killed_over_pdsh, user_run, test_hosts,
                                                                               tmp_path_factory):
    _, at, _ = killed_over_pdsh
    run_dir, args, env, records = user_run
    reference = reference_run(tmp_path_factory)["losses"]
    nodes = [subprocess.Popen(test_hosts.in_node(n, [sys.executable, "-m", "trl_ds", "launcher=torchrun",
                                                     f"cluster.master_port={PORT}", *args, f"cluster.node_rank={n}"]),
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (0, 1)]
    rc1, _, err1, _ = finish(nodes[1], 600)
    rc0, _, err0, _ = finish(nodes[0], 600)
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    assert f"trl_ds: resuming from {run_dir}/trainer/checkpoint-{at}" in err0
    rows = trained_rows(run_dir)
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))  # each step once: the resumed ones replaced
    assert [row["loss"] for row in rows] == pytest.approx(reference, abs=1e-6)
    assert (run_dir / "trainer" / "my_steps.txt").read_text() == str(STEPS - at)  # the script's callback: this launch
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("completed", STEPS, 2)
    assert summary["script"] == str(user_train_py(tmp_path_factory))
    assert summary["mean_loss"] == pytest.approx(sum(reference) / STEPS, abs=1e-6)  # both launches' steps
    assert {n: read_json(records / f"rank_{n}.json")["address"] for n in (0, 1)} == {0: "10.88.0.1", 1: "10.88.0.2"}
    for rank in (0, 1):  # each host's rank measured its own engine
        assert read_json(run_dir / "memory" / f"rank_{rank}.json")["model_states"]
