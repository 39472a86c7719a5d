"""Host and network preflight: `trl-ds doctor [overrides]`, and before every launch (preflight.hosts).

On every node the launch will use (each host over ssh for the deepspeed launcher's ssh mode, else this node):
cluster.master_addr resolves and answers, the master port is free on node 0, every interface named by a
*_SOCKET_IFNAME variable exists, /dev/shm has room for the node's ranks, and torch, deepspeed, transformers, trl and
the trl_ds commit are the same as on node 0. Each problem is one line naming the node, its host and the fix;
exit code 2.
"""
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

from trl_ds.config.values import value
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.launch import launch_env, main_addr, placed_by_slurm, spawn_env, this_node_rank
from trl_ds.launch.deepspeed import RUNNER_TOOLS
from trl_ds.launch.host_checks import PACKAGES, interface_names, probe
from trl_ds.launch.launchers import launcher_of, ssh_hosts

SHM_PER_RANK = 256 * 2**20  # bytes of /dev/shm a rank may use (NCCL buffers, DataLoader workers)
SSH_TIMEOUT_S = 60
GIB = 2**30


def check_hosts(cfg, env: Optional[Dict[str, str]] = None) -> List[str]:
    """Every problem on every node, each one line; [] when the hosts are ready."""
    env = env or spawn_env()
    c = cfg.cluster
    request = {"master_addr": main_addr(cfg), "master_port": c.master_port,
               "interfaces": interface_names(launch_env(cfg))}
    hosts = ssh_hosts(cfg)
    if hosts:
        runner = RUNNER_TOOLS[value(cfg.launcher.multinode_runner)]
        problems = [f"{tool} is not installed on this node; the deepspeed launcher starts the hosts with it. Install "
                    f"it ({package}), or start each node yourself with launcher.no_ssh=true."
                    for tool, package in (("ssh", "apt-get install openssh-client"), runner)
                    if not shutil.which(tool, path=env.get("PATH"))]
        if problems:
            return problems
        views = {}
        for rank, host in enumerate(hosts):
            view, problem = _probe_over_ssh(host, {**request, "check_port": rank == 0}, env)
            if problem:
                problems.append(f"node {rank} ({host}): {problem}")
            else:
                views[rank] = (host, view)
    else:
        rank = this_node_rank(cfg)
        check_port = rank == 0 and (c.nodes > 1 or launcher_of(cfg).port_on_one_node)
        views = {rank: (socket.gethostname(), probe({**request, "check_port": check_port, "versions": False}))}
        problems = []
    for rank, (host, view) in sorted(views.items()):
        problems += _node_problems(cfg, f"node {rank} ({host})", view, request["master_addr"])
    return problems + _version_problems(views)


def _probe_over_ssh(host: str, request: dict, env: Dict[str, str]) -> Tuple[Optional[dict], Optional[str]]:
    """Run the probe on host as the deepspeed runner runs ranks: from this folder, this Python, this PYTHONPATH."""
    path = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    remote = (f"cd {shlex.quote(os.getcwd())} && PYTHONPATH={shlex.quote(path)} exec {shlex.quote(sys.executable)} "
              f"-m trl_ds.launch.host_checks {shlex.quote(json.dumps(request))}")
    cmd = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host, remote]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=SSH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"did not answer over ssh within {SSH_TIMEOUT_S} s. Check the host, or use launcher.no_ssh=true."
    if done.returncode == 255:  # ssh's own failure
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"`ssh -o BatchMode=yes {host} true` fails ({reason}). Set up passwordless ssh from this node "
                      f"(ssh-copy-id {host}), or start each node yourself with launcher.no_ssh=true.")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"the check could not run there with {sys.executable} from {os.getcwd()} ({reason}). "
                      f"Install the same environment at the same path on every node.")


def _node_problems(cfg, node: str, view: dict, main: str) -> List[str]:
    c = cfg.cluster
    problems = []
    if c.nodes > 1:
        problems += _main_addr_problems(cfg, node, view, main)
    env = launch_env(cfg)
    for name in view["missing_interfaces"]:
        var = next(k for k in sorted(env) if k.endswith("_SOCKET_IFNAME") and name in env[k].split(","))
        problems.append(f"{node}: no network interface {name} (from {var}={env[var]}); the node has "
                        f"{', '.join(view.get('interfaces', [])) or 'other ones'}. Set +cluster.env.{var}=NAME to "
                        f"the interface on the nodes' shared network.")
    if view["port_busy"]:
        problems.append(f"{node}: cluster.master_port={c.master_port} is in use there, so the rendezvous cannot "
                        f"listen on it. Pick a free port, e.g. cluster.master_port={c.master_port + 1}.")
    need = SHM_PER_RANK * c.gpus_per_node
    if view["shm_free"] is not None and view["shm_free"] < need:
        problems.append(f"{node}: /dev/shm has {view['shm_free'] / GIB:.2f} GiB free; {c.gpus_per_node} rank(s) need "
                        f"{need / GIB:.2f} GiB. Enlarge it (docker run --shm-size={need // GIB + 1}g, or mount -o "
                        f"remount,size={need // GIB + 1}G /dev/shm).")
    return problems


def _main_addr_problems(cfg, node: str, view: dict, main: str) -> List[str]:
    """The main address as the node sees it; under a SLURM allocation it is the job's first node, not the config's
    (launch.sh reads it from SLURM on the node), so the fix is the cluster's, not an override."""
    resolved = f" ({view['resolved']})" if view["resolved"] else ""
    if placed_by_slurm(cfg):
        named = f"the main node {main}{resolved}, the job's first node (from SLURM; cluster.master_addr is not used)"
        fix = ("The job's nodes must resolve and reach each other (scontrol show node NAME gives the address SLURM "
               "hands out): ask the cluster's admins, or exclude the node (launcher.slurm.extra_sbatch=['--exclude="
               "NODE']).")
    else:
        named = f"cluster.master_addr={cfg.cluster.master_addr}{resolved}"
        fix = None
    if not view["resolved"]:
        return [f"{node}: {named} does not resolve there. " + (fix or "Use node 0's address or a name every node "
                                                                       "resolves, e.g. cluster.master_addr=10.0.0.1.")]
    if view["reach"]:
        return [f"{node}: {named} is not reachable from there ({view['reach']}). " + (
            fix or "Set cluster.master_addr to node 0's address on the network the nodes share.")]
    return []


def _version_problems(views: Dict[int, Tuple[str, dict]]) -> List[str]:
    """Each node against node 0 (or the first node that answered): one line per node that differs."""
    if len(views) < 2:
        return []
    first = min(views)
    host0, base = views[first][0], views[first][1]["versions"]
    problems = []
    for rank, (host, view) in sorted(views.items()):
        diff = [name for name in ("trl_ds",) + PACKAGES if view["versions"].get(name) != base.get(name)]
        if rank != first and diff:
            theirs = ", ".join(f"{n} {view['versions'].get(n)}" for n in diff)
            ours = ", ".join(f"{n} {base.get(n)}" for n in diff)
            pins = " ".join(f"{n}=={base.get(n)}" for n in diff if n != "trl_ds")
            fix = [f"pip install {pins} there"] if pins else []
            fix += [f"check out trl_ds {base.get('trl_ds')} there"] if "trl_ds" in diff else []
            problems.append(f"node {rank} ({host}) has {theirs} where node {first} ({host0}) has {ours}. Install the "
                            f"same versions on every node ({'; '.join(fix)}).")
    return problems


def preflight(cfg) -> None:
    """Before a launch: raise ConfigError with every host problem (preflight.hosts=false skips the checks)."""
    if cfg.preflight.hosts and not launcher_of(cfg).submits:  # a job's nodes are known once it runs
        problems = check_hosts(cfg)
        if problems:
            raise ConfigError(problems)


USAGE = """usage: trl-ds doctor [overrides]

Check the hosts and their network as a launch with the same Hydra overrides would use them: master address, master
port, *_SOCKET_IFNAME interfaces, /dev/shm, ssh/pdsh, and package versions across nodes. Exit code 2 lists every
problem.

The overrides are run's, with the keys that bring your own files (docs/interop.md): launcher.from_accelerate=FILE
(an accelerate YAML's machines and addresses, as the run reads them), deepspeed.from_file=, trainer.from_trl_config=,
script=."""


def main(argv: Optional[List[str]] = None) -> int:
    from trl_ds.check.resolve import resolve

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return 0
    try:
        run = resolve(args, fit="off")  # an accelerate YAML's machines and addresses, as the run reads them
    except ConfigError as err:  # Hydra's own message for an unknown option or a misspelled key
        print(f"trl-ds doctor: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    cfg = run.cfg
    problems = run.problems or check_hosts(cfg)
    for problem in problems:
        print(f"trl-ds doctor: {problem}", file=sys.stderr)
    if problems:
        return EXIT_USER_ERROR
    scope = f"{cfg.cluster.nodes} node(s)" if ssh_hosts(cfg) else (
        f"node {this_node_rank(cfg)} (this one; run the doctor on every node with its cluster.node_rank)"
        if cfg.cluster.nodes > 1 else "1 node(s)")
    print(f"trl-ds doctor: {scope}, launcher={value(cfg.launcher.name)}: ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
