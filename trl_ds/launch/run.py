"""The one place that spawns: run this node's share of launch.sh, watch it, and say clearly how it ended.

The watch ends a launch whose ranks have not joined within launcher.rdzv_timeout (the deepspeed launcher has no such
timeout), and a node started on its own whose ranks die tells the others through the main store (launch/peers.py),
which stop at once. Stopping a launch ends its whole process tree."""
import glob
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, List, Optional

from trl_ds.errors import EXIT_USER_ERROR
from trl_ds.rundir.layout import FAILURE_FILE, JOINED_FILE
from trl_ds.rundir.lifeline import die_with_parent, launcher_env

from .failure import (  # noqa: F401  (summary.py imports them from here)
    Failure,
    NodeView,
    describe,
    failed_rank_log,
    never_reached,
    remote_rank_failure,
    tail,
    write_failure,
)
from .peers import ANNOUNCE_WAIT_S, Peers
from .remote import end_remote_launchers

POLL_S = 0.5
GRACE_S = 10  # the launcher's and the ranks' start-up before the rendezvous clock starts
STOP_WAIT_S = 40  # torchrun and deepspeed's launch give their ranks 30 s to end after SIGTERM before killing them
PEER_EXIT_WAIT_S = 5  # over ssh: how long a rank's exit on losing a peer waits for the exit of the rank it lost


class Stopped(Exception):
    """This launcher got SIGTERM (scancel, kill) or SIGINT (Ctrl-C); the node's launcher and ranks were ended."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_node(cmd: List[str], env: dict, node: NodeView, tell_peers: bool, progress=None) -> int:
    """Run cmd (launch.sh for this node); its output goes to logs/node_K/launcher.log only, the terminal shows
    `progress` (launch/progress.py) and the outcome. tell_peers: announce this node's failure in the main store, and
    stop on another's (nodes started one by one)."""
    os.makedirs(node.log_dir, exist_ok=True)
    for stale in (FAILURE_FILE, JOINED_FILE):  # from an earlier launch in this run dir
        _remove(os.path.join(node.log_dir, stale))
    attempts_before = _attempts(node.log_dir)
    # The launcher and ranks end with this process, whatever kills it (SIGKILL included): rundir/lifeline.py. The
    # deepspeed runner over ssh gets SIGKILL, as in _stop: its SIGTERM handler ends every DeepSpeed launch on the hosts.
    env = {**env, **launcher_env()}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent(signal.SIGKILL if node.ssh_hosts else signal.SIGTERM))
    captured: List[str] = []
    pump = threading.Thread(target=_tee, args=(proc.stdout, os.path.join(node.log_dir, "launcher.log"), captured),
                            daemon=True)
    pump.start()
    peers = Peers(node.endpoint) if node.nodes > 1 and tell_peers else None
    previous = signal.signal(signal.SIGTERM, raise_stopped)
    try:
        stopped = _watch(proc, node, attempts_before, peers, captured, env, progress)
    except KeyboardInterrupt:
        _stop(proc, node, env)
        raise Stopped(signal.SIGINT) from None
    except Stopped:
        _stop(proc, node, env)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress:
            _show(progress, "close")
    pump.join(timeout=STOP_WAIT_S)
    if proc.returncode == 0 and not stopped:
        return 0
    # Over ssh, every node's exits that reached this output, not only those seen when the launch was stopped
    remote = remote_rank_failure("".join(captured), node) if node.ssh_hosts else None
    failure = remote or stopped or describe("".join(captured), proc.returncode, node)
    _report(node, failure)
    if peers and not stopped and failure.main_reached:
        # Before its ranks joined, the main store may not be up yet (rank 0 still importing): keep trying a while.
        early = node.rank != 0 and not _joined(node.log_dir, attempts_before)
        peers.announce(f"node {node.rank} failed: {failure.message}", wait_s=ANNOUNCE_WAIT_S if early else 0)
    if failure.refused:  # a user mistake a node or a rank found: the launch exits 2, as one found before it does
        return EXIT_USER_ERROR
    return proc.returncode if proc.returncode not in (0, EXIT_USER_ERROR) else 1


def _watch(proc: subprocess.Popen, node: NodeView, attempts_before: set, peers: Optional[Peers],
           captured: List[str], env: dict, progress=None) -> Optional[Failure]:
    """Wait for the node's launcher, showing progress; stop it early, with the reason, on a missed rendezvous, a
    peer's failure, or (deepspeed over ssh) a rank that died on any node: pdsh would wait for the other nodes' ranks,
    which wait in a process group that will never complete."""
    deadline = time.monotonic() + node.rdzv_timeout + GRACE_S
    joined, lost_at = False, None
    while not _exited(proc):
        if progress:
            _show(progress, "poll")
        if node.ssh_hosts:
            remote = remote_rank_failure("".join(captured), node)
            lost_at = lost_at or (time.monotonic() if remote else None)
            # a rank that only lost its peer: the exit of the rank that left first may be a line behind
            if remote and (remote.own or time.monotonic() > lost_at + PEER_EXIT_WAIT_S):
                _stop(proc, node, env)
                return remote
        joined = joined or _joined(node.log_dir, attempts_before)
        if not joined and time.monotonic() > deadline:
            _stop(proc, node, env)
            return never_reached(node)
        peer_failure = peers.failure() if peers else None
        if peer_failure:
            _stop(proc, node, env)
            return Failure(f"node {node.rank} stopped its ranks because {peer_failure}")
    return None


def _exited(proc: subprocess.Popen) -> bool:
    """Wait up to POLL_S; True as soon as the process ends (not at the next tick: a launch ends with no delay)."""
    try:
        proc.wait(timeout=POLL_S)
        return True
    except subprocess.TimeoutExpired:
        return False


def _joined(log_dir: str, attempts_before: set) -> bool:
    """torchrun's rendezvous is done, or (any launcher) the ranks wrote that their process group formed."""
    return os.path.exists(os.path.join(log_dir, JOINED_FILE)) or bool(_attempts(log_dir) - attempts_before)


def _attempts(log_dir: str) -> set:
    """torchrun makes an attempt folder once the rendezvous is done and it starts the ranks."""
    return set(glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*")))  # a run dir may hold [ ] * ?


def _show(progress, method: str) -> None:
    """A progress display problem is reported once, turns the display off, and never ends the launch."""
    if getattr(progress, "broken", False):
        return
    try:
        getattr(progress, method)()
    except Exception as err:  # noqa: BLE001 (any display error: the training goes on)
        progress.broken = True
        print(f"trl_ds: progress display stopped ({err!r}); the run goes on", file=sys.stderr)


def _tee(stream: IO[bytes], path: str, captured: List[str]) -> None:
    """Copy the launcher's output to its log; a full disk stops the log, never the reading (that would block ranks)."""
    log = open(path, "a")
    try:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            captured.append(line)
            if not log.closed:
                try:
                    log.write(line)
                    log.flush()
                except OSError:  # the rest is still captured; the failure record says what happened
                    _close_quietly(log)
    finally:
        _close_quietly(log)


def _close_quietly(log: IO[str]) -> None:
    """Close a log whose disk filled up (closing flushes what is buffered, which fails again)."""
    try:
        log.close()
    except OSError:
        pass


def raise_stopped(signum, frame):
    raise Stopped(signum)


def _stop(proc: subprocess.Popen, node: NodeView, env: dict) -> None:
    """SIGTERM the node's launcher (launch.sh execs it) and its whole tree (the deepspeed runner forwards no SIGTERM on
    one node or with --no_ssh); SIGKILL what outlives STOP_WAIT_S. Over ssh the runner gets SIGKILL (its SIGTERM
    handler ends every DeepSpeed launch on the hosts), and this run's launchers on the hosts are ended over ssh."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)  # now: once the launcher ends they are orphans
    except psutil.NoSuchProcess:
        children = []
    _signal(proc, signal.SIGKILL if node.ssh_hosts else signal.SIGTERM)
    for process in children:
        _signal(process, signal.SIGTERM)
    if node.ssh_hosts:
        end_remote_launchers(node.ssh_hosts, os.path.dirname(os.path.dirname(node.log_dir)), env)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for process in psutil.wait_procs(children, timeout=5)[1]:
        _signal(process, signal.SIGKILL)


def _signal(process, signum: int) -> None:
    import psutil

    try:
        process.send_signal(signum)
    except psutil.NoSuchProcess:  # a child that ended meanwhile (Popen.send_signal skips an ended launcher itself)
        pass


def _report(node: NodeView, failure: Failure) -> None:
    try:
        write_failure(node, failure)
    except OSError:  # a full or read-only disk: the line below still says what failed
        pass
    print(f"trl_ds: launch failed: {failure.message}", file=sys.stderr)
    print(f"  launcher output: {os.path.join(node.log_dir, 'launcher.log')}", file=sys.stderr)


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)
