"""One launch per run dir (and node) at a time: a lock file taken before anything is written, released on every exit.

The lock names its holder (pid and its start time, host, run dir, launch id: rundir/lifeline.py) and is never seen
half-written (a private file hard-linked to its name; without hard links, created then written, so an unreadable lock
a few seconds old is held). It is stale when no process of its launch lives on this host, or when it was copied with
its run dir; the next launch takes it over and says so, one at a time under a flock on the run dir. A lock held on
another host cannot be checked from here: it is reported with how to clear it."""
import fcntl
import json
import os
import socket
import sys
import time
from typing import Optional

from trl_ds.errors import ConfigError
from trl_ds.rundir.layout import launch_lock
from trl_ds.rundir.lifeline import launch_processes, start_time, this_launch_id


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
        if self._create():
            return
        with _serialised(self.run_dir):  # one judge of a stale lock at a time
            for _ in range(3):  # the holder may release it while we read it
                holder = read_holder(self.path)
                if holder is None and not os.path.lexists(self.path):
                    if self._create():
                        return
                    continue
                reason = stale_reason(holder, self.run_dir, self.path)
                if reason is None or reason.startswith(STILL_RUNNING):
                    raise ConfigError([busy_message(self.run_dir, holder, self.path, reason)])
                print(f"trl_ds: taking over {self.path}: {reason}", file=sys.stderr)
                _remove(self.path)
                if self._create():
                    return
        raise ConfigError([busy_message(self.run_dir, read_holder(self.path), self.path)])

    def release(self) -> None:
        if self.held and (read_holder(self.path) or {}).get("pid") == os.getpid():
            _remove(self.path)
        self.held = False

    def _create(self) -> bool:
        """Write the holder to a private file, then link it to the lock's name: atomic, and whole when seen."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(me(self.run_dir), f)
        except OSError as e:  # a read-only or full run dir: name the lock the user sees, not the private file
            if os.path.exists(tmp):
                _remove(tmp)
            raise OSError(e.errno, e.strerror, self.path) from e
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some network or FUSE file systems): create-exclusive, then write
            return self._create_exclusive()
        finally:
            _remove(tmp)
        self.held = True
        return True

    def _create_exclusive(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(me(self.run_dir), f)
        self.held = True
        return True


STILL_RUNNING = "processes of its launch still run"
FLOCK_LIMIT_S = 30  # the run dir's flock is held for a read and a write; longer is a launcher stopped in between
WRITING_GRACE_S = 5.0  # _create_exclusive creates the lock, then writes it: an unreadable lock this young is held


class _serialised:
    """An exclusive flock on the run dir itself for the with-block (released if this process dies)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __enter__(self):
        self.fd = os.open(self.run_dir, os.O_RDONLY)
        deadline = time.monotonic() + FLOCK_LIMIT_S  # another launcher holds it for one read and one write
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    line = (f"{self.run_dir}: another process has held the run dir's flock (the judge of a stale "
                            f"launch lock) for {FLOCK_LIMIT_S} s; is a trl_ds launcher stopped there (fuser -v "
                            f"{self.run_dir})? End it, or give another hydra.run.dir.")
                    raise ConfigError([line]) from None
                time.sleep(0.1)
            except OSError:  # a file system without locks (NFS mounted nolock): the takeover is then not serialised
                return

    def __exit__(self, *exc):
        os.close(self.fd)  # closing releases the flock


def me(run_dir: str) -> dict:
    return {"pid": os.getpid(), "started": start_time(os.getpid()), "host": socket.gethostname(),
            "run_dir": run_dir, "launch_id": this_launch_id(), "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def stale_reason(holder: Optional[dict], run_dir: str, path: str) -> Optional[str]:
    """Why the lock's holder cannot be running a launch in this run dir any more; None when it may be (STILL_RUNNING:
    its launcher ended but processes of its launch still run)."""
    if not holder:  # written whole by link(): an empty or cut lock is damage (an older trl_ds, a full disk) ...
        if _age(path) < WRITING_GRACE_S:  # ... or a launch on a file system without links, writing it right now
            return None
        return "it is unreadable (empty or cut short), so no launch can be named in it"
    who = f"pid {holder.get('pid')} on {holder.get('host')}"
    if holder.get("run_dir") != run_dir:
        return f"it was taken by {who} for {holder.get('run_dir')} (this run dir is a copy)"
    if holder.get("host") != socket.gethostname():
        return None
    started = start_time(holder.get("pid"))
    if started is not None and started == holder.get("started"):
        return None
    left = launch_processes(holder.get("launch_id"))
    if left:
        return (f"{STILL_RUNNING}: its launcher ({who}) has ended, but {len(left)} of its processes have not "
                f"(pids {' '.join(map(str, left))}); they end by themselves within seconds of losing their "
                f"launcher. Wait and rerun, or stop them: kill {' '.join(map(str, left))}")
    if started is None:
        return f"its launcher ({who}) has ended"
    return f"its launcher ({who}) has ended; that pid is another process now"


def busy_message(run_dir: str, holder: Optional[dict], path: str, reason: Optional[str] = None) -> str:
    if reason:
        return f"hydra.run.dir={run_dir} is in use: {reason}."
    if not holder:
        return (f"hydra.run.dir={run_dir} is in use: another launch took {path} moments ago. Wait for it to end or "
                f"stop it, or use another hydra.run.dir.")
    return (f"hydra.run.dir={run_dir} is in use by another launch (pid {holder.get('pid')} on {holder.get('host')}, "
            f"since {holder.get('since')}). Wait for it to end or stop it, or use another hydra.run.dir; if that "
            f"launch is gone (another host that trl_ds cannot check), delete {path}.")


def read_holder(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            holder = json.load(f)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _age(path: str) -> float:
    """Seconds since the file was last written; infinite when it is gone."""
    try:
        return time.time() - os.path.getmtime(path)
    except OSError:
        return float("inf")


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
