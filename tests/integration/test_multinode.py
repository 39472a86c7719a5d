"""Multi-node torchrun over loopback: two launcher processes (cluster.node_rank=0 and 1, one CPU rank each) sharing a
run dir as nodes share a filesystem. The training across hosts with their own addresses is in test_hosts_per_node.py;
here, the ways a multi-node launch goes wrong: a node that never joins, which must end every node with a message
naming the node and its log, within launcher.rdzv_timeout, never a hang (a node whose rank dies before joining the
process group: test_hosts_per_node.py's rank-killed tests, one per launcher, across the hosts); and elastic launches
that start with fewer nodes, or grow.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, communicate_waiting, read_json, run_app
from trl_ds.launch.torchrun import WORKER_MODULE

pytestmark = pytest.mark.integration
RDZV_TIMEOUT = 8
# the time the nodes wait besides the configured timeout (polls, a failing node's report), counted as finish counts it
SLACK_S = 45


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_model_dir(tmp_path_factory) -> str:
    """The tiny model saved once, given to every run by path.

    Runs that build it themselves save it from global rank 0 only (transformers' save_pretrained writes on rank 0
    once torch.distributed is up), so with two nodes node 1 would race a half-written folder; a model given by
    path is also how real multi-node runs start.
    """
    folder = tmp_path_factory.getbasetemp() / "tiny_model"
    if not (folder / "config.json").exists():
        # The default config as a run composes it (trl_ds.config.compose: the one composition), no launch needed.
        code = ("import sys; from trl_ds.config.compose import compose; from trl_ds.worker.models import "
                "save_tiny_model; cfg = compose(); save_tiny_model(cfg.model, sys.argv[1], cfg.seed)")
        subprocess.run([sys.executable, "-c", code, str(folder)], check=True, cwd=REPO, timeout=300)
    return str(folder)


def reference_run(tmp_path_factory) -> dict:
    """The single-node run (1 node × 2 CPU ranks, global batch 4), made once and shared by every launcher test."""
    run_dir = tmp_path_factory.getbasetemp() / "reference_run"
    if not (run_dir / "summary.json").exists():
        out = run_app([f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"], run_dir)
        assert out.returncode == 0, out.stdout + out.stderr
    return {"summary": read_json(run_dir / "summary.json"), "losses": losses(run_dir)}


def losses(run_dir) -> list:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [row["loss"] for row in map(json.loads, f) if "loss" in row]


def start_node(args, run_dir, env=None):
    cmd = [sys.executable, "-m", "trl_ds", *args, f"hydra.run.dir={run_dir}"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def finish(proc, timeout):
    """(returncode, stdout, stderr, seconds it waited from now): the time its processes neither ran nor stood ready
    for a CPU (conftest.communicate_waiting), so a busy machine slows a node without failing its bound."""
    return communicate_waiting(proc, timeout)


def pending_signals(pid) -> set:
    """Signals sent to the process that it has not handled yet (a stopped process holds them)."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return set()
    mask = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            mask |= int(line.split()[1], 16)
    return {s for s in signal.Signals if mask >> (s - 1) & 1}


def two_node_args(tmp_path_factory, port, timeout=60):
    return [f"model.name_or_path={tiny_model_dir(tmp_path_factory)}", "cluster.nodes=2", "cluster.gpus_per_node=1",
            "cluster.master_addr=127.0.0.1", f"cluster.master_port={port}", f"launcher.rdzv_timeout={timeout}"]


@pytest.mark.light
@pytest.mark.xdist_group("waits")  # one worker waits through them while the other runs the unit tests
def test_node_that_never_joins_ends_node_0_naming_it(tmp_path_factory, tmp_path):
    port = free_port()
    node0 = start_node(two_node_args(tmp_path_factory, port, RDZV_TIMEOUT) + ["cluster.node_rank=0"], tmp_path)
    rc, out, err, took = finish(node0, RDZV_TIMEOUT + 120)
    assert rc != 0
    assert took < RDZV_TIMEOUT + SLACK_S
    # torchrun's own timeout says how many joined; the watch's deadline (if torchrun started slowly) says less.
    expected = (rf"trl_ds: launch failed: node 1 never joined: (1 of 2 nodes reached the|the) rendezvous at "
                rf"127\.0\.0\.1:{port} (was not complete )?within launcher\.rdzv_timeout={RDZV_TIMEOUT} s")
    assert re.search(expected, err), err
    assert "Traceback" not in err, err  # torchrun's store error stays in the node's launcher log
    failure = read_json(tmp_path / "logs" / "node_0" / "failure.json")
    assert failure["log"] == str(tmp_path / "logs" / "node_0" / "launcher.log")
    assert read_json(tmp_path / "summary.json")["status"] == "failed"


@pytest.mark.light
@pytest.mark.xdist_group("waits")
def test_worker_node_without_a_main_node_gives_up_within_the_timeout(tmp_path_factory, tmp_path):
    port = free_port()
    node1 = start_node(two_node_args(tmp_path_factory, port, RDZV_TIMEOUT) + ["cluster.node_rank=1"], tmp_path)
    rc, _, err, took = finish(node1, RDZV_TIMEOUT + 120)
    assert rc != 0
    assert took < RDZV_TIMEOUT + SLACK_S
    assert (f"node 1 never joined: the main node's rendezvous at 127.0.0.1:{port} did not answer (is node 0 "
            f"started, and does that address reach it from here?) within launcher.rdzv_timeout={RDZV_TIMEOUT} "
            f"s.") in err
    assert (tmp_path / "logs" / "node_1" / "failure.json").exists()


def test_elastic_c10d_starts_with_min_nodes_and_keeps_the_global_batch(tmp_path_factory, tmp_path):
    """launcher.min_nodes=1 of cluster.nodes=2, only node 0 started: torchrun's c10d rendezvous starts it alone after
    launcher.last_call_s. Its one rank accumulates 2 micro-batches per step where the 2 planned ranks would take 1
    each, so the global batch (4) and the losses are those of the 2-rank reference run."""
    reference = reference_run(tmp_path_factory)
    run_dir = tmp_path / "run"
    out = run_app([*two_node_args(tmp_path_factory, free_port()), "launcher.rdzv_backend=c10d", "launcher.min_nodes=1",
                   "launcher.last_call_s=1", "trainer.max_steps=3"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["world_size"], summary["global_batch"]) == (1, 4)
    assert "world size     1 (DEEPSPEED, cpu); 1 of 2 planned ranks joined (launcher.min_nodes), global batch 4 " \
           "kept" in out.stdout
    log = next((run_dir / "logs" / "node_0").rglob("stderr.log")).read_text() + \
        next((run_dir / "logs" / "node_0").rglob("stdout.log")).read_text()
    assert "accumulating 2 micro-batches per step instead of 1 keeps the global batch" in log
    assert losses(run_dir) == pytest.approx(reference["losses"][:3], abs=1e-6)


def test_a_node_joining_an_elastic_run_restarts_it_larger_from_the_last_checkpoint(tmp_path_factory, tmp_path):
    """Node 0 starts alone (launcher.min_nodes=1 of 2); node 1 arrives once checkpoint-5 is complete. torchrun
    restarts every rank at world 2; they resume from the last complete checkpoint, converted from world 1 to
    DeepSpeed's universal format, and the steps the world-1 run had already made after it come out the same (one
    rank accumulating 2 micro-batches, or two ranks 1 each, over the same samples). torch's shared rendezvous store
    hangs this join (pytorch/pytorch#135712); launch.sh turns the sharing off for c10d."""
    run_dir = tmp_path / "run"
    args = [*two_node_args(tmp_path_factory, free_port(), timeout=120), "launcher.rdzv_backend=c10d",
            "launcher.min_nodes=1", "launcher.last_call_s=1", "trainer.max_steps=150",  # node 1 arrives mid-run
            "checkpoint.every_steps=5"]
    node0 = start_node([*args, "cluster.node_rank=0"], run_dir)
    marker = run_dir / "trainer" / "checkpoint-5" / "trl_ds_complete.json"
    deadline = time.monotonic() + 300
    while not marker.exists() and node0.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "node 0 made no checkpoint-5"
    # node 0's rank waits, stopped, until its torchrun ends it for the restart that node 1's arrival brings: on a
    # busy machine it could otherwise train all 150 steps before node 1 has started
    ranks = [p.pid for p in psutil.Process(node0.pid).children(recursive=True)
             if WORKER_MODULE in p.cmdline() and not any("torchrun" in part for part in p.cmdline())]
    assert len(ranks) == 1, ranks
    os.kill(ranks[0], signal.SIGSTOP)
    node1 = start_node([*args, "cluster.node_rank=1"], run_dir)
    try:
        while signal.SIGTERM not in pending_signals(ranks[0]) and time.monotonic() < deadline + 300:
            time.sleep(0.1)
    finally:
        os.kill(ranks[0], signal.SIGCONT)
    rc1, _, err1, _ = finish(node1, 600)
    rc0, out0, err0, _ = finish(node0, 600)
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["world_size"], summary["steps"], summary["global_batch"]) == (2, 150, 4)
    rank_logs = "".join(p.read_text() for p in (run_dir / "logs").rglob("std*.log"))
    resumed = re.search(r"checkpoint-(\d+) was written by world size 1 with ZeRO stage 2; this launch has world size 2 "
                        r"with ZeRO stage 2: converted it to DeepSpeed's universal format", rank_logs)
    assert resumed, rank_logs[-3000:]
    logged = {}  # step -> its losses: a step the world-1 run made after the checkpoint is made again at world 2
    for row in map(json.loads, (run_dir / "metrics.jsonl").open()):
        if "loss" in row:
            logged.setdefault(row["step"], []).append(row["loss"])
    assert sorted(logged) == list(range(1, 151))
    for step, losses_of_step in logged.items():
        assert losses_of_step == pytest.approx([losses_of_step[0]] * len(losses_of_step), abs=1e-6), step
