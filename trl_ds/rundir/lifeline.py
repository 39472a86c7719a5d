"""A launch's processes never outlive its launcher: the contract between the launching process and its ranks.

torchrun starts each rank in a session of its own, so a SIGKILL to the launcher (or its process group) reaches
neither its ranks nor the node's launcher. Three things close that gap:
- the node's launcher (and the universal conversion) get a parent-death signal (`die_with_parent`, PR_SET_PDEATHSIG);
- every rank watches the launching process (pid, host, start time in its environment) and its own parent, and ends
  itself within about a second of either ending (`watch_launcher`);
- the node's launcher carries LAUNCH_ID in its environment, which its ranks inherit, so the run dir's lock is stale
  only when none of them still lives (`launch_processes`).
The launch id lives here because both sides read it: launch/ sets it, worker/ watches it.
"""
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Dict, List, Optional

LAUNCH_ID = "TRL_DS_LAUNCH_ID"  # one per launching process: <uuid>
LAUNCHER_PID = "TRL_DS_LAUNCHER_PID"
LAUNCHER_HOST = "TRL_DS_LAUNCHER_HOST"
LAUNCHER_STARTED = "TRL_DS_LAUNCHER_STARTED"  # psutil's create_time of the launcher: a reused pid is not it
WATCH_EVERY_S = 0.5
EXIT_GRACE_S = 5  # after SIGTERM to itself, a rank stuck in a collective (no Python runs) is ended with _exit
PR_SET_PDEATHSIG = 1

_launch_id = uuid.uuid4().hex


def launcher_env() -> Dict[str, str]:
    """What the launching process adds to its children's environment."""
    return {LAUNCH_ID: _launch_id, LAUNCHER_PID: str(os.getpid()), LAUNCHER_HOST: socket.gethostname(),
            LAUNCHER_STARTED: repr(start_time(os.getpid()))}


def this_launch_id() -> str:
    return _launch_id


def die_with_parent(signum: int = signal.SIGTERM):
    """A Popen preexec_fn: the child gets `signum` when this process ends (Linux; elsewhere nothing is set). It
    survives exec; a parent that died between fork and prctl is caught by comparing the parent pid afterwards."""
    import ctypes

    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the ranks' watch still ends them
        prctl = None

    def preexec():
        if prctl is None:
            return
        prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def start_time(pid) -> Optional[float]:
    """psutil's create time of a live, non-zombie process, else None."""
    import psutil

    try:
        process = psutil.Process(int(pid))
        if process.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped: gone for every purpose here
            return None
        return process.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError, ValueError):
        return None


def launch_processes(launch_id: Optional[str]) -> List[int]:
    """Pids on this host whose environment carries this launch id (the node's launcher, its ranks)."""
    import psutil

    if not launch_id:
        return []
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(LAUNCH_ID) == launch_id \
                    and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return sorted(found)


def watch_launcher(env=os.environ, every_s: float = WATCH_EVERY_S) -> Optional[threading.Thread]:
    """In a rank: end soon after the launching process (on this host) or the parent ends; the thread."""
    parent = os.getppid()
    launcher = None
    if env.get(LAUNCHER_PID) and env.get(LAUNCHER_HOST) == socket.gethostname():
        launcher = (int(env[LAUNCHER_PID]), env.get(LAUNCHER_STARTED))

    def gone() -> Optional[str]:
        if os.getppid() != parent:
            return f"its parent process (pid {parent}) ended"
        if launcher and repr(start_time(launcher[0])) != launcher[1]:
            return f"the trl_ds launcher (pid {launcher[0]}) ended"
        return None

    def watch():
        while True:
            why = gone()
            if why:
                rank = env.get("RANK", "?")
                print(f"trl_ds: rank {rank} stops: {why}; the next launch resumes from the newest complete checkpoint",
                      file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(EXIT_GRACE_S)
                os._exit(1)
            time.sleep(every_s)

    thread = threading.Thread(target=watch, name="trl_ds-launcher-watch", daemon=True)
    thread.start()
    return thread
