"""torch's op locks on a shared machine (issue 41): a lock held the way torch's loader holds it (its FileBaton, no
process in the op folder) is held, never removed; one whose holder was killed is recognised and removed within
seconds; a wait on a live holder has a limit and names it; locks are found where torch keeps the op folders."""
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import run_waiting
from lock_holder import FILE_BATON, SCRIPT, LockHolder, stale_lock

from trl_ds import op_locks
from trl_ds.launch import clear_left_op_locks
from trl_ds.launch.env_probe import lock_state
from trl_ds.launch.failure import ranks_failure
from trl_ds.launch.rank_exits import RankExit

# Lock holders in other processes, waited on for seconds: make test runs these with the other waits, beside the unit
# tests (not in make test-fast)
pytestmark = [pytest.mark.integration, pytest.mark.light, pytest.mark.xdist_group("waits")]


def op_folder(root, op="deepspeed_shm_comm"):
    folder = root / op
    folder.mkdir(parents=True)
    return folder


def holder_command(lock) -> str:
    """The holder's command line as started, whitespace collapsed, cut to 120 characters."""
    return " ".join(" ".join([sys.executable, "-c", SCRIPT, FILE_BATON, str(lock)]).split())[:120]


def test_a_lock_held_like_torchs_loader_is_never_removed(tmp_path):
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)  # the case: a cwd check called this lock "left by a killed build"
    try:
        assert op_locks.holders(str(lock)) == {holder.pid}
        assert op_locks.judge(str(lock)) == "held"
        assert not op_locks.clear_if_stale(str(lock)) and lock.exists()
    finally:
        assert holder.release() == 0  # its own lock, still there to release


def test_a_killed_holders_lock_is_recognised_and_removed(tmp_path):
    lock = op_folder(tmp_path) / "lock"
    stale_lock(lock, cwd=tmp_path)
    assert lock.exists() and op_locks.holders(str(lock)) == set()
    assert op_locks.judge(str(lock)) == "stale"
    assert op_locks.clear_if_stale(str(lock)) and not lock.exists()
    assert os.listdir(lock.parent) == []  # nothing set aside is left


def test_a_wait_names_the_holder_ends_when_it_releases_and_removes_nothing(tmp_path, capsys):
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    threading.Timer(2.5, holder.release).start()
    started = time.monotonic()
    assert op_locks.wait_for(str(lock), notice_s=1) is False  # released by its holder, not removed by the wait
    assert 2.0 < time.monotonic() - started < 10
    assert holder.proc.wait(timeout=10) == 0
    assert capsys.readouterr().err == (f"trl_ds: waiting for torch's op lock {lock}, held by pid {holder.pid} "
                                       f"({holder_command(lock)}): it is loading or building the op (at most 1200 s)\n")


def test_a_wait_removes_a_lock_whose_holder_dies_during_it(tmp_path, capsys):
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    threading.Timer(1.0, holder.kill).start()
    started = time.monotonic()
    assert op_locks.wait_for(str(lock)) is True
    assert time.monotonic() - started < 10 and not lock.exists()
    assert capsys.readouterr().err == (f"trl_ds: removed {lock}: no process holds it (a process killed while loading "
                                       f"the op left it)\n")


def test_a_wait_on_a_live_holder_ends_at_its_limit_naming_the_holder(tmp_path):
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    try:
        started = time.monotonic()
        try:
            op_locks.wait_for(str(lock), limit_s=2)
            raise AssertionError("the wait had no limit")
        except op_locks.OpLockTimeoutError as err:
            message = str(err)
        assert time.monotonic() - started < 6
        assert message == (f"waited 2 s for torch's op lock {lock}, held by pid {holder.pid} "
                           f"({holder_command(lock)}). A build of a DeepSpeed op takes minutes; if that process is "
                           f"stuck, stop it, or delete the lock if nothing is building the op.")
    finally:
        assert holder.release() == 0


def torch_build_directory(op: str, env: dict) -> str:
    """torch's own answer (cpp_extension._get_build_directory), asked in a process of its own: importing cpp_extension
    here would put setuptools' vendored packages on this process's path."""
    code = f"from torch.utils.cpp_extension import _get_build_directory as d; print(d({op!r}, False))"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME")} | env
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_locks_are_found_where_torch_keeps_the_op_folders(tmp_path, monkeypatch):
    """torch's _get_build_directory: $TORCH_EXTENSIONS_DIR/<op> when set (no <py+device> level), else
    $XDG_CACHE_HOME/torch_extensions/<py+device>/<op>."""
    for env in ({"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, {"XDG_CACHE_HOME": str(tmp_path / "cache")}):
        monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
        for key, path in env.items():
            monkeypatch.setenv(key, path)
        folder = torch_build_directory("cpu_adam", env)  # torch makes the folder
        open(os.path.join(folder, "lock"), "w").close()
        assert op_locks.lock_files(["cpu_adam", "async_io"]) == [os.path.join(folder, "lock")]
        assert op_locks.lock_files(["async_io"]) == []


def test_the_launch_preflight_removes_a_left_lock_and_keeps_a_held_one(tmp_path, monkeypatch, compose_cfg, capsys):
    """A default CPU run loads DeepSpeed's shm_comm op; with offload.optimizer=cpu also cpu_adam."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    left, held = op_folder(tmp_path, "deepspeed_shm_comm") / "lock", op_folder(tmp_path, "cpu_adam") / "lock"
    stale_lock(left, cwd=tmp_path)
    holder = LockHolder(held, cwd=tmp_path)
    try:
        clear_left_op_locks(compose_cfg(["zero=stage2", "offload=cpu"]))
        assert not left.exists() and held.exists()
        assert capsys.readouterr().err == (f"trl_ds: removed {left}: no process holds it (a process killed while "
                                           f"loading the op left it)\n")
    finally:
        assert holder.release() == 0


def test_trl_ds_env_names_a_locks_holder_or_says_nobody_holds_it(tmp_path):
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    assert lock_state(str(lock)) == f"held by pid {holder.pid} ({holder_command(lock)}), loading or building the op"
    holder.kill()
    assert lock_state(str(lock)) == ("no process holds it (a killed load left it); the next trl_ds command that loads "
                                     "the op removes it")


# A process that loads an op the way DeepSpeed's builders do (torch's cpp_extension.load, into a given folder), with
# trl_ds's bounded wait, as every rank of trl_ds (worker/train.py, worker/script.py, worker/fit.py) does.
LOADER = """
import sys
from trl_ds.op_locks import bound_op_lock_waits
bound_op_lock_waits()
from torch.utils.cpp_extension import load
load(name="trl_ds_probe_op", sources=[sys.argv[1]], build_directory=sys.argv[2])
"""


def timeout_stderr(lock, holder, limit_s=1) -> str:
    return (f"OpLockTimeoutError: waited {limit_s} s for torch's op lock {lock}, held by pid {holder.pid} "
            f"({holder_command(lock)}). A build of a DeepSpeed op takes minutes; if that process is stuck, stop it, "
            f"or delete the lock if nothing is building the op.\n")


def test_a_rank_beside_a_held_lock_ends_at_the_limit_in_one_line_the_launch_reports(tmp_path):
    """The wait's end is one line and exit code 2 (no traceback), which the launch's failure report gives as the
    rank's refusal; $TRL_DS_OP_LOCK_LIMIT_S sets the limit."""
    folder = op_folder(tmp_path, "trl_ds_probe_op")
    (tmp_path / "probe.cpp").write_text("int probe() { return 0; }\n")
    lock = folder / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    try:
        done = run_waiting([sys.executable, "-c", LOADER, str(tmp_path / "probe.cpp"), str(folder)],
                           env={**os.environ, op_locks.LIMIT_ENV: "1"}, text=True, waited_s=60)  # not wall time
        assert (done.returncode, done.stderr) == (2, timeout_stderr(lock, holder))
        log = tmp_path / "rank1.log"
        log.write_text(done.stderr)
        failure = ranks_failure([RankExit(1, done.returncode, "node 0, local rank 1", str(log))])
        assert failure.refused and failure.message == f"rank 1 (node 0, local rank 1) refused: {done.stderr.strip()}"
    finally:
        assert holder.release() == 0


def deepspeed_free(stderr: str) -> str:
    """stderr without DeepSpeed's own log lines ("[2026-12-05 10:00:00,123] [WARNING] ...")."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("[20"))


def test_build_ops_and_calibrate_beside_a_held_lock_end_at_the_limit_in_one_line(tmp_path):
    """Both load DeepSpeed's shm_comm op in their own process (calibrate before it spawns its ranks)."""
    lock = op_folder(tmp_path) / "lock"
    holder = LockHolder(lock, cwd=tmp_path)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), op_locks.LIMIT_ENV: "1"}
    try:
        for command in (["build-ops", "deepspeed_shm_comm"], ["calibrate", "--out", str(tmp_path / "hw.yaml")]):
            done = run_waiting([sys.executable, "-m", "trl_ds.cli", *command], env=env, text=True,
                               waited_s=120)  # a bound on waiting, not on wall time (conftest.run_waiting)
            assert (done.returncode, deepspeed_free(done.stderr), done.stdout) == (2, timeout_stderr(lock, holder),
                                                                                   ""), command
            assert "Traceback" not in done.stderr
        assert not (tmp_path / "hw.yaml").exists()
    finally:
        assert holder.release() == 0
