"""One launch per run dir (and node) at a time: a lock file taken before anything is written, released on every exit.

The lock records who holds it (pid, the pid's start time, host, run dir). A lock whose launcher is gone (same host,
no such process, or the pid now belongs to another process) or that was copied with its run dir is stale: the next
launch takes it over and says so. A lock held on another host cannot be checked from here: it is reported with how
to clear it.
"""
import json
import os
import socket
import sys
import time
from typing import Optional

from trl_ds.errors import ConfigError
from trl_ds.rundir.layout import launch_lock

UNREADABLE_GRACE_S = 5  # a lock file just created and not yet written reads as empty


def lock_path(run_dir: str, node_rank: int) -> str:
    return os.path.join(run_dir, launch_lock(node_rank))


class RunDirLock:
    def __init__(self, run_dir: str, node_rank: int = 0):
        self.run_dir = run_dir
        self.path = lock_path(run_dir, node_rank)
        self.held = False

    def acquire(self) -> None:
        """Take the lock, or raise ConfigError naming the launch that holds it."""
        os.makedirs(self.run_dir, exist_ok=True)
        for _ in range(2):  # a second try after removing a stale lock
            if self._create():
                return
            holder = read_holder(self.path)
            reason = stale_reason(holder, self.run_dir, self.path)
            if reason is None:
                raise ConfigError([busy_message(self.run_dir, holder, self.path)])
            print(f"trl_ds: taking over {self.path}: {reason}", file=sys.stderr)
            _remove(self.path)
        raise ConfigError([busy_message(self.run_dir, read_holder(self.path), self.path)])

    def release(self) -> None:
        if self.held and (read_holder(self.path) or {}).get("pid") == os.getpid():
            _remove(self.path)
        self.held = False

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(me(self.run_dir), f)
        self.held = True
        return True


def me(run_dir: str) -> dict:
    return {"pid": os.getpid(), "started": _start_time(os.getpid()), "host": socket.gethostname(),
            "run_dir": run_dir, "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def stale_reason(holder: Optional[dict], run_dir: str, path: str) -> Optional[str]:
    """Why the lock's holder cannot be running a launch in this run dir any more; None when it may be."""
    if not holder:  # a launcher killed while writing it, unless one is writing it right now
        young = time.time() - _mtime(path) < UNREADABLE_GRACE_S
        return None if young else "it is unreadable (its launcher was killed while writing it)"
    who = f"pid {holder.get('pid')} on {holder.get('host')}"
    if holder.get("run_dir") != run_dir:
        return f"it was taken by {who} for {holder.get('run_dir')} (this run dir is a copy)"
    if holder.get("host") != socket.gethostname():
        return None
    started = _start_time(holder.get("pid"))
    if started is None:
        return f"its launcher ({who}) has ended"
    if started != holder.get("started"):
        return f"its launcher ({who}) has ended; that pid is another process now"
    return None


def busy_message(run_dir: str, holder: Optional[dict], path: str) -> str:
    holder = holder or {}
    return (f"hydra.run.dir={run_dir} is in use by another launch (pid {holder.get('pid')} on {holder.get('host')}, "
            f"since {holder.get('since')}). Wait for it to end or stop it, or use another hydra.run.dir; if that "
            f"launch is gone (another host that trl_ds cannot check), delete {path}.")


def _start_time(pid) -> Optional[float]:
    import psutil

    try:
        return psutil.Process(int(pid)).create_time()
    except (psutil.NoSuchProcess, TypeError, ValueError):
        return None


def read_holder(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
