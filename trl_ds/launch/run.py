"""The one place that spawns: run this node's share of launch.sh, watch it, and say clearly how it ended.

The watch bounds what torchrun alone leaves open: a node that never reaches the rendezvous ends the launch after
launcher.rdzv_timeout, and a node whose ranks die tells the others (through the main node's rendezvous store),
which stop at once instead of waiting in a process group that will never complete.
"""
import glob
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, List, Optional

from .failure import FAILURE_FILE, Failure, NodeView, describe, never_reached, write_failure
from .failure import failed_rank_log, tail  # noqa: F401  (summary.py imports them from here)
from .peers import Peers

POLL_S = 0.5
GRACE_S = 10  # torchrun's own start-up before its rendezvous clock starts
STOP_WAIT_S = 40  # torchrun gives its ranks 30 s to end after SIGTERM before it kills them


class Terminated(Exception):
    """This launcher got SIGTERM (scancel, kill): the node's launcher and ranks must end with it."""


def run_node(cmd: List[str], env: dict, node: NodeView, watch_rendezvous: bool) -> int:
    """Run cmd (launch.sh for this node); its output goes to the terminal and logs/node_K/launcher.log."""
    os.makedirs(node.log_dir, exist_ok=True)
    _remove(os.path.join(node.log_dir, FAILURE_FILE))
    attempts_before = _attempts(node.log_dir)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    captured: List[str] = []
    pump = threading.Thread(target=_tee, args=(proc.stdout, os.path.join(node.log_dir, "launcher.log"), captured),
                            daemon=True)
    pump.start()
    peers = Peers(node.endpoint) if node.nodes > 1 and watch_rendezvous else None
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        stopped = _watch(proc, node, attempts_before if watch_rendezvous else None, peers)
    except (KeyboardInterrupt, Terminated):
        _stop(proc)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    pump.join(timeout=STOP_WAIT_S)
    if proc.returncode == 0 and not stopped:
        return 0
    failure = stopped or describe("".join(captured), proc.returncode, node)
    _report(node, failure)
    if peers and not stopped:
        peers.announce(f"node {node.rank} failed: {failure.message}")
    return proc.returncode or 1


def _watch(proc: subprocess.Popen, node: NodeView, attempts_before: Optional[set], peers: Optional[Peers]
           ) -> Optional[Failure]:
    """Wait for the node's launcher; stop it early, with the reason, on a missed rendezvous or a peer's failure."""
    deadline = time.monotonic() + node.rdzv_timeout + GRACE_S
    joined = attempts_before is None
    while not _exited(proc):
        joined = joined or bool(_attempts(node.log_dir) - attempts_before)
        if not joined and time.monotonic() > deadline:
            _stop(proc)
            return never_reached(node)
        peer_failure = peers.failure() if peers and joined else None
        if peer_failure:
            _stop(proc)
            return Failure(f"node {node.rank} stopped its ranks because {peer_failure}")
    return None


def _exited(proc: subprocess.Popen) -> bool:
    """Wait up to POLL_S; True as soon as the process ends (not at the next tick: a launch ends with no delay)."""
    try:
        proc.wait(timeout=POLL_S)
        return True
    except subprocess.TimeoutExpired:
        return False


def _attempts(log_dir: str) -> set:
    """torchrun makes an attempt folder once the rendezvous is done and it starts the ranks."""
    return set(glob.glob(os.path.join(log_dir, "*", "attempt_*")))


def _tee(stream: IO[bytes], path: str, captured: List[str]) -> None:
    with open(path, "a") as log:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            captured.append(line)
            log.write(line)
            log.flush()
            sys.stderr.write(line)


def _raise_terminated(signum, frame):
    raise Terminated()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the node's launcher (launch.sh execs it), which ends its ranks; SIGKILL it if it does not end."""
    proc.terminate()
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _report(node: NodeView, failure: Failure) -> None:
    write_failure(node, failure)
    print(f"trl_ds: launch failed: {failure.message}", file=sys.stderr)


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)
