"""Stopping a launch (scancel and kill send SIGTERM, Ctrl-C sends SIGINT) ends this node's launcher and every rank
under it, for torchrun and for the deepspeed launcher (whose runner forwards no SIGTERM on one node), with one line
instead of a traceback; rerunning in the same run dir resumes from the newest complete checkpoint."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, read_json

from tests.integration.test_multinode import free_port
from tests.integration.test_resume import complete_steps

pytestmark = pytest.mark.integration

STEPS, EVERY = 150, 5
LAUNCHERS = {"torchrun": [], "deepspeed": ["launcher=deepspeed", "cluster.hostfile=hostfiles/local.txt"]}


def start(launcher, run_dir):
    port = [f"cluster.master_port={free_port()}"] if launcher == "deepspeed" else []  # deepspeed has no --standalone
    cmd = [sys.executable, "-m", "trl_ds", *LAUNCHERS[launcher], *port, f"trainer.max_steps={STEPS}",
           f"checkpoint.every_steps={EVERY}", f"hydra.run.dir={run_dir}"]
    # SIGINT as a terminal delivers it, even when this suite runs in the background (where the shell ignores it)
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)), cmd


def processes_of(run_dir) -> list:
    """Pids of every process (launcher, deepspeed's launch, ranks) whose command line names this run dir."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(str(run_dir).encode() in part for part in cmdline):
            found.append(int(pid))
    return found


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


# Each launcher and each signal once: either signal (Stopped or KeyboardInterrupt in run_node) ends in the same
# launcher-independent stop of the node's tree (_stop in trl_ds/launch/run.py: SIGTERM to the launcher and every
# process under it), so neither signal is tried again with the other launcher.
@pytest.mark.parametrize("launcher, signum", [("torchrun", signal.SIGTERM), ("deepspeed", signal.SIGINT)])
def test_stopping_a_launch_ends_every_rank_with_one_line(launcher, signum, tmp_path):
    proc, cmd = start(launcher, tmp_path)
    rerun = launcher == "torchrun"  # this case is stopped after a checkpoint, then the same command is run again
    # The ranks wrote that their process group formed (the join watch reads the same file): they are training.
    wait_for(lambda: (tmp_path / "logs" / "node_0" / "joined").exists() and (complete_steps(tmp_path) or not rerun)
             or proc.poll() is not None, 300, "the ranks joined")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert (tmp_path / "logs" / "node_0" / "joined").read_text() == "2 ranks\n"
    ranks = [pid for pid in processes_of(tmp_path) if pid != proc.pid]
    assert len(ranks) >= 2  # at least the two ranks besides the trl_ds process
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum
    assert err.rstrip().splitlines()[-1] == (
        f"trl_ds: launch stopped by {name}: this node's launcher and ranks were ended. To resume from the newest "
        f"complete checkpoint, rerun the command with hydra.run.dir={tmp_path}")
    assert "Error executing job" not in err  # no Hydra traceback of trl_ds's own
    # Nor the launcher's (torchrun's SignalException): trl_ds's line is all the terminal shows; the log keeps it.
    assert "Traceback" not in err and "SignalException" not in err, err
    wait_for(lambda: not processes_of(tmp_path), 10, "no launcher or rank of this run is left")
    summary = read_json(tmp_path / "summary.json")
    assert (summary["status"], summary["reason"]) == ("stopped", f"stopped by {name}")
    assert not (tmp_path / "launch.lock").exists()  # released: the next launch in this run dir is not refused
    if rerun:
        assert_the_rerun_resumes_from_the_newest_checkpoint(cmd, tmp_path)


def assert_the_rerun_resumes_from_the_newest_checkpoint(cmd, tmp_path):
    resumed_from = max(complete_steps(tmp_path))
    assert resumed_from < STEPS
    with open(tmp_path / "metrics.jsonl") as f:
        logged_before = len([row for row in map(json.loads, f) if "loss" in row])
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = read_json(tmp_path / "summary.json")
    assert (summary["status"], summary["steps"]) == ("completed", STEPS)
    with open(tmp_path / "metrics.jsonl") as f:
        steps = [row["step"] for row in map(json.loads, f) if "loss" in row]
    # The rerun starts right after the checkpoint (logging_steps is 1) and goes on to the end.
    assert steps[logged_before:] == list(range(resumed_from + 1, STEPS + 1))
