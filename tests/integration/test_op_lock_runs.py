"""Runs beside torch's op locks on a shared machine (issue 41), on a copy of the built ops (conftest.copy_op_cache), so
the user's own cache is never locked: torch's default folder (under a HOME of the test's own) and TORCH_EXTENSIONS_DIR,
which name the same op folders here. `trl-ds calibrate` and `trl-ds check-equivalence` beside a left lock: in
test_calibration.py and test_partial_batch.py, sharing their runs."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO, copy_op_cache, run_app
from lock_holder import LockHolder, stale_lock

pytestmark = pytest.mark.integration
OP = "deepspeed_shm_comm"  # every CPU run loads it (DeepSpeed's shared-memory collectives)
WAITING = "trl_ds: waiting for torch's op lock"


@pytest.fixture
def ops(tmp_path, monkeypatch):
    """(env for torch's default folder, env for TORCH_EXTENSIONS_DIR, the op's lock): one op folder for both.
    The default folder is ~/.cache/torch_extensions/<py+device>/ under a HOME of the test's own."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")  # conftest's own_op_cache
    cache = tmp_path / "home" / ".cache"
    tag = copy_op_cache(cache, (OP,))
    default = {"HOME": str(cache.parent), "XDG_CACHE_HOME": str(cache)}
    return default, {"TORCH_EXTENSIONS_DIR": str(tag)}, tag / OP / "lock"


def rank_logs(run_dir):
    return sorted(run_dir.glob("logs/node_0/*/attempt_0/*/stderr.log"))


def wait_until_ranks_wait(run_dirs, ranks=2, limit_s=240):
    """Until every rank of every run says it waits for the lock (trl_ds names a wait after 5 s)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        logs = [log for run_dir in run_dirs for log in rank_logs(run_dir)]
        if len(logs) == ranks * len(run_dirs) and all(WAITING in log.read_text() for log in logs):
            return
        time.sleep(0.5)
    pytest.fail(f"the ranks of {run_dirs} never waited for the lock within {limit_s} s")


def losses(run_dir):
    with open(run_dir / "metrics.jsonl") as f:
        return [record["loss"] for record in map(json.loads, f) if "loss" in record]


def test_two_trainings_wait_beside_a_held_lock_and_one_rank_clears_it_once_its_holder_is_killed(tmp_path, ops):
    """Two launches, one through torch's default folder and one through TORCH_EXTENSIONS_DIR, wait while a live process
    holds the op's lock, and neither removes it (nor does their preflight); once the holder is killed, the lock it
    left is removed by exactly one of their four ranks, and both train."""
    default, explicit, lock = ops
    holder = LockHolder(lock, cwd=tmp_path)  # as torch's loader holds it: no process in the op folder
    held = os.stat(lock).st_ino  # the holder keeps it open: no other file at that path can have this inode meanwhile
    runs = {tmp_path / "a": default, tmp_path / "b": explicit}
    with ThreadPoolExecutor(2) as pool:
        done = {run: pool.submit(run_app, ["trainer.max_steps=2"], run, timeout=420, env=env)
                for run, env in runs.items()}
        wait_until_ranks_wait(list(runs))
        assert os.stat(lock).st_ino == held  # still its holder's: no launch or rank removed a held lock
        holder.kill()
        for run, future in done.items():
            out = future.result()
            assert out.returncode == 0, out.stderr[-3000:]
            assert len(losses(run)) == 2
    removed = [log for run in runs for log in rank_logs(run)
               if f"trl_ds: removed {lock}: no process holds it" in log.read_text()]
    assert len(removed) == 1, removed


def test_a_lock_left_before_a_launch_is_removed_by_its_preflight(tmp_path, ops):
    _, explicit, lock = ops
    stale_lock(lock, cwd=tmp_path)
    out = run_app(["trainer.max_steps=1"], tmp_path / "run", timeout=240, env=explicit)
    assert out.returncode == 0, out.stderr[-3000:]
    first = out.stderr.splitlines()[0]
    assert first == f"trl_ds: removed {lock}: no process holds it (a process killed while loading the op left it)"
    assert not lock.exists() and len(losses(tmp_path / "run")) == 1


def test_a_rank_waiting_on_a_held_lock_is_said_on_the_launching_terminal_within_10_s(tmp_path, ops):
    """The rank's log says it waits (after 5 s); the launcher's terminal says it too, naming the rank and the holder,
    within 10 s of the rank's own line, while the holder still holds the lock; then the run trains."""
    _, explicit, lock = ops
    holder = LockHolder(lock, cwd=tmp_path)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "trl_ds", "trainer.max_steps=1", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, **explicit}, start_new_session=True)
    said = {}  # the launcher's line -> when it arrived
    reader = threading.Thread(target=lambda: said.update((line.rstrip("\n"), time.monotonic()) for line in proc.stderr))
    reader.start()
    try:
        logged = None
        deadline = time.monotonic() + 300
        expected = f"trl_ds: rank 0: waiting for torch's op lock {lock}, held by pid {holder.pid}"
        while time.monotonic() < deadline:
            logs = [log for log in rank_logs(run_dir) if WAITING in log.read_text()]
            logged = logged or (time.monotonic() if logs else None)
            shown = [at for line, at in list(said.items()) if line.startswith(expected)]
            if shown:
                assert shown[0] - logged <= 10 if logged else True
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the launcher never said the wait: {list(said)}")
        assert os.path.exists(lock)  # still held: said while waiting, not after
        holder.kill()
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(timeout=10)
    assert len(losses(run_dir)) == 1
