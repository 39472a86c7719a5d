"""Why a node's launch failed, in one sentence that names the rank or node and the log to read."""
import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from trl_ds.rundir.layout import FAILURE_FILE, LOGS_DIR, node_log_dir

from .rank_exits import PEER_LEFT, RankExit, exit_text, exits_text, last_error, refusal

# Each rank in torchrun's failure report; the one after "Root Cause (first observed failure)" failed first.
TORCHRUN_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank: (\d+)\)\s*exitcode\s*:\s*(-?\d+)")
TORCHRUN_ROOT = "Root Cause"
# deepspeed.launcher.launch: "[... '--local_rank=1', ...] exits with return code = 7"
DEEPSPEED_RANK = re.compile(r"--local_rank=(\d+).*? exits with return code = (-?\d+)")
# The same line from a node started over ssh: pdsh puts "HOST: " before each line of a node's output.
REMOTE_RANK = re.compile(r"^(\S+): .*?--local_rank=(\d+).*? exits with return code = (-?\d+)", re.M)
START_EVERY_NODE = ("Start every node (bash launch.sh NODE_RANK, or python -m trl_ds ... cluster.node_rank=N), "
                    "or raise launcher.rdzv_timeout.")
# mpirun on the first rank to die: by a signal (with its host) or an exit code; at times it prints only MPIRUN_ABORTED.
MPIRUN_ABORTED = "Primary job  terminated normally, but 1 process returned"
MPIRUN_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")
MPIRUN_EXIT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")
CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")
# torchrun on a node > 0 that never reached node 0's store (it retries once, then gives up).
MAIN_UNREACHABLE = re.compile(r"timed out after \d+ms while trying to connect to")
# launch.sh's own refusals (exit 2): the node's GPUs (launch/gpu_count.py), a node rank or a SLURM step of another
# size than the run's. Its line is the launch's failure, said once.
SCRIPT_REFUSAL = re.compile(r"^trl_ds: ((?:node \S+ \(.*\) has \d+ usable GPU\(s\)|NODE_RANK must be|this SLURM "
                            r"step has) .*)$", re.M)


@dataclass
class Failure:
    message: str
    log: Optional[str] = None
    main_reached: bool = True  # false: this node never reached the main node, so there is no one to tell
    refused: bool = False  # a user mistake the node or a rank refused with one line: the launch exits 2
    own: bool = True  # false: the rank named only lost a peer; another node's failure is the cause


@dataclass
class NodeView:
    """What the failure reader needs to know about the node it runs on."""
    rank: int
    nodes: int
    gpus_per_node: int
    log_dir: str
    endpoint: str  # main address:port
    rdzv_timeout: int
    ssh_hosts: List[str] = field(default_factory=list)  # deepspeed over pdsh: every node's host, by node rank
    starts_every_node: bool = False  # this launch starts the other nodes too (deepspeed over ssh, pdsh or MPI)
    hosts: List[str] = field(default_factory=list)  # when it does: every node's host, by node rank


def describe(output: str, returncode: int, node: NodeView) -> Failure:
    """The failing rank (torchrun, deepspeed), a rendezvous that timed out, or else the node's launcher log."""
    for reader in (_script_refusal, remote_rank_failure, _torchrun_rank, _deepspeed_rank, _mpirun_rank, _rendezvous,
                   _main_unreachable):
        found = reader(output, node)
        if found:
            return found
    log = os.path.join(node.log_dir, "launcher.log")
    if MPIRUN_ABORTED in output:
        return Failure(f"a rank that mpirun started failed and mpirun ended the job (exit {exit_text(returncode)}); "
                       f"Open MPI left out which rank this time; the ranks' output is in {log}", log)
    return Failure(f"node {node.rank}: the launcher exited with {exit_text(returncode)}; its output is in {log}",
                   log)


def _script_refusal(output: str, node: NodeView) -> Optional[Failure]:
    match = SCRIPT_REFUSAL.search(output)
    return Failure(match.group(1), os.path.join(node.log_dir, "launcher.log"), refused=True) if match else None


def ranks_failure(exits: List[RankExit], hosts: List[str] = ()) -> Optional[Failure]:
    """The one rule for every launcher path (rank_exits.first_own); a rank's refusal is said as its own line."""
    if not exits:
        return None
    text, chosen = exits_text(exits, hosts)
    refused = refusal(chosen)
    if refused:
        return Failure(f"rank {chosen.rank} ({chosen.where}) refused: {refused}", chosen.log, refused=True)
    return Failure(text, chosen.log, own=not chosen.lost_a_peer())


def _torchrun_rank(output: str, node: NodeView) -> Optional[Failure]:
    def log_of(_: int, local: int) -> str:
        found = _latest(os.path.join(glob.escape(node.log_dir), "*", "attempt_*", str(local), "stderr.log"))
        return found or node.log_dir

    return ranks_failure(torchrun_exits(output, lambda rank: node.rank, log_of))


def torchrun_exits(report: str, node_of: Callable[[int], int], log_of: Callable[[int, int], str]) -> List[RankExit]:
    """Every rank of one torchrun failure report: the one it observed first ("Root Cause") first, then the others,
    whose signals torchrun sent itself once that one had failed."""
    root_at = report.rfind(TORCHRUN_ROOT)
    if root_at < 0:
        return []
    exits = []
    for match in sorted(TORCHRUN_RANK.finditer(report), key=lambda m: m.start() < root_at):
        rank, local, code = (int(g) for g in match.groups())
        node_rank = node_of(rank)
        exits.append(RankExit(rank, code, f"node {node_rank}, local rank {local}", log_of(node_rank, local),
                              ended_by_launcher=match.start() < root_at and code < 0))
    return exits


def slurm_job_failure(run_dir: str, job: str, gpus_per_node: int) -> Optional[Failure]:
    """launcher=slurm: each node's torchrun wrote its failure report into the job's error file (srun gathers them,
    in the order they came); the rank that failed first of its own accord across all of them. None without one."""
    try:
        with open(os.path.join(run_dir, f"slurm-{job}.err"), errors="replace") as f:
            text = f.read()
    except OSError:
        return None

    def log_of(node_rank: int, local: int) -> str:
        folder = node_log_dir(run_dir, node_rank)
        return _latest(os.path.join(glob.escape(folder), "*", "attempt_*", str(local), "stderr.log")) or folder

    exits = [e for report in text.split("Failures:")[1:]
             for e in torchrun_exits(report, lambda rank: rank // gpus_per_node, log_of)]
    return ranks_failure(exits)


def _deepspeed_rank(output: str, node: NodeView) -> Optional[Failure]:
    exits = []
    for match in DEEPSPEED_RANK.finditer(output):
        local, code = int(match.group(1)), int(match.group(2))
        rank = node.rank * node.gpus_per_node + local
        log = _latest(os.path.join(glob.escape(node.log_dir), f"*_rank{rank}.log"))
        exits.append(RankExit(rank, code, f"node {node.rank}, local rank {local}", log or node.log_dir))
    return ranks_failure(exits)


def remote_rank_failure(output: str, node: NodeView) -> Optional[Failure]:
    """Ranks that died on nodes the deepspeed runner started over ssh (node 0 included): each node from its host."""
    exits = []
    for match in REMOTE_RANK.finditer(output) if node.ssh_hosts else ():
        host, local, code = match.group(1), int(match.group(2)), int(match.group(3))
        if host not in node.ssh_hosts:
            continue
        node_rank = node.ssh_hosts.index(host)
        rank = node_rank * node.gpus_per_node + local
        folder = node_log_dir(os.path.dirname(os.path.dirname(node.log_dir)), node_rank)
        log = _latest(os.path.join(glob.escape(folder), f"*_rank{rank}.log"))
        exits.append(RankExit(rank, code, f"node {node_rank}, host {host}, local rank {local}", log or folder))
    return ranks_failure(exits, node.ssh_hosts)


def _mpirun_rank(output: str, node: NodeView) -> Optional[Failure]:
    """A rank that an MPI launcher started: its output went to this node's launcher.log, as mpirun gathers it, and
    mpirun reports one rank, the first it saw end (maybe one that only lost the rank that failed)."""
    by_signal, by_code = MPIRUN_SIGNAL.search(output), MPIRUN_EXIT.search(output)
    if by_signal:
        rank, host, code = int(by_signal.group(1)), by_signal.group(2), -int(by_signal.group(3))
    elif by_code:
        rank, host, code = int(by_code.group(1)), None, int(by_code.group(2))
    else:
        return None
    node_rank = node.hosts.index(host) if host in node.hosts else rank // node.gpus_per_node
    host = host or (node.hosts[node_rank] if node_rank < len(node.hosts) else "?")
    log = os.path.join(node.log_dir, "launcher.log")
    return ranks_failure([RankExit(rank, code, f"node {node_rank}, host {host}", log, shared=True)], node.hosts)


def _rendezvous(output: str, node: NodeView) -> Optional[Failure]:
    match = CLIENTS_JOINED.search(output)
    if not match:
        return None
    joined, total = int(match.group(1)), int(match.group(2))
    return Failure(f"{missing_nodes(total, joined)} never joined: {joined} of {total} nodes reached the rendezvous "
                   f"at {node.endpoint} within launcher.rdzv_timeout={node.rdzv_timeout} s. {START_EVERY_NODE}",
                   os.path.join(node.log_dir, "launcher.log"))


def _main_unreachable(output: str, node: NodeView) -> Optional[Failure]:
    return never_reached(node) if node.rank > 0 and MAIN_UNREACHABLE.search(output) else None


def missing_nodes(total: int, joined: Optional[int] = None) -> str:
    """Node 0 hosts the rendezvous, so with two nodes the missing one is node 1."""
    if total == 2:
        return "node 1"
    return f"{total - joined} of nodes 1..{total - 1}" if joined is not None else f"some of nodes 1..{total - 1}"


def never_reached(node: NodeView) -> Failure:
    """The watch's own deadline passed before torchrun said more (node 0), or node 0 never answered (others)."""
    log = os.path.join(node.log_dir, "launcher.log")
    if node.starts_every_node:
        logs = os.path.dirname(node.log_dir)
        text = (f"the ranks did not form the process group at {node.endpoint} within launcher.rdzv_timeout="
                f"{node.rdzv_timeout} s, though this launch started every node. Read the rank logs under {logs}/ "
                f"(one folder per node) and check the hosts with trl-ds doctor and the same overrides "
                f"(a missing GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME is a common cause), or raise "
                f"launcher.rdzv_timeout.")
    elif node.rank == 0:
        text = (f"{missing_nodes(node.nodes)} never joined: the rendezvous at {node.endpoint} was not complete "
                f"within launcher.rdzv_timeout={node.rdzv_timeout} s. {START_EVERY_NODE}")
    else:
        text = (f"node {node.rank} never joined: the main node's rendezvous at {node.endpoint} did not answer (is "
                f"node 0 started, and does that address reach it from here?) within launcher.rdzv_timeout="
                f"{node.rdzv_timeout} s.")
    return Failure(f"{text} Launcher output: {log}", log, main_reached=node.rank == 0 or node.starts_every_node)


def _latest(pattern: str) -> Optional[str]:
    paths = glob.glob(pattern)
    return max(paths, key=os.path.getmtime) if paths else None


def write_failure(node: NodeView, failure: Failure) -> None:
    with open(os.path.join(node.log_dir, FAILURE_FILE), "w") as f:
        json.dump({"node": node.rank, "message": failure.message, "log": failure.log, "own": failure.own}, f,
                  indent=2)


def failed_rank_log(run_dir: str) -> Optional[str]:
    """The log named by a node's failure.json (a node whose rank failed of its own accord before one whose rank only
    lost a peer), else the first rank log holding a traceback of its own."""
    logs = os.path.join(glob.escape(run_dir), LOGS_DIR)  # the run dir is a literal path: it may hold [ ] * ?
    recorded = []
    for path in sorted(glob.glob(os.path.join(logs, "node_*", FAILURE_FILE))):
        try:
            with open(path) as f:
                found = json.load(f)
        except ValueError:  # cut short by a full disk
            continue
        if found.get("log"):
            recorded.append((not found.get("own", True), found["log"]))
    if recorded:
        return min(recorded, key=lambda r: r[0])[1]  # the first own, else the first
    rank_logs = glob.glob(os.path.join(logs, "**", "stderr.log"), recursive=True)
    rank_logs += glob.glob(os.path.join(logs, "**", "*_rank*.log"), recursive=True)
    failed = []
    for path in sorted(rank_logs):
        with open(path, errors="replace") as f:
            if "Traceback" in f.read():
                failed.append(path)
    # A rank whose error is its own comes before one that only saw a peer leave.
    return next((p for p in failed if not PEER_LEFT.search(last_error(p) or "")), failed[0] if failed else None)


def tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])
