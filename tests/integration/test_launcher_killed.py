"""Ranks never outlive their launcher: a SIGKILL to the `python -m trl_ds` process alone, or to its whole process
group (as a batch system or an OOM killer sends it), ends torchrun and every rank within seconds, and the next
launch in the run dir resumes from the newest complete checkpoint with no orphan training beside it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, read_json

from tests.integration.test_resume import complete_steps
from tests.integration.test_stop import processes_of, wait_for

pytestmark = pytest.mark.integration

ENDED_WITHIN_S = 10


def launch(run_dir, steps):
    cmd = [sys.executable, "-m", "trl_ds", f"trainer.max_steps={steps}", "checkpoint.every_steps=2",
           "batch.global_size=4", f"hydra.run.dir={run_dir}"]
    # A session of its own, as `setsid python -m trl_ds ... &` or a batch system's job step: killpg reaches the
    # launcher and what shares its group (bash -> torchrun), never this test.
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True), cmd


@pytest.mark.parametrize("target", ["launcher", "group"])
def test_sigkill_to_the_launcher_ends_its_ranks_and_a_rerun_resumes(target, tmp_path):
    proc, cmd = launch(tmp_path, steps=300)
    wait_for(lambda: complete_steps(tmp_path) or proc.poll() is not None, 300, "a complete checkpoint")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    others = [pid for pid in processes_of(tmp_path) if pid != proc.pid]
    assert len(others) >= 3  # torchrun and two ranks (bash execs torchrun)
    killed_at = time.monotonic()
    if target == "launcher":
        os.kill(proc.pid, signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    wait_for(lambda: not processes_of(tmp_path), ENDED_WITHIN_S, "torchrun and both ranks ended")
    ended_s = time.monotonic() - killed_at
    print(f"SIGKILL to the {target}: every process of the launch ended {ended_s:.1f} s later")
    kept = complete_steps(tmp_path)
    assert kept and max(kept) < 300
    # The rerun (a lower max_steps, to finish soon) resumes from the newest complete checkpoint and ends alone.
    newest = max(kept)
    rerun = subprocess.run([*cmd[:3], f"trainer.max_steps={newest + 2}", *cmd[4:]], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"trl_ds: resuming from {tmp_path}/trainer/checkpoint-{newest}\n" in rerun.stderr
    summary = read_json(tmp_path / "summary.json")
    assert (summary["status"], summary["steps"]) == ("completed", newest + 2)
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert rows[-1]["step"] == newest + 2
    assert not processes_of(tmp_path)
