"""The deepspeed launcher: one command on node 0 that reaches the other hosts over ssh/pdsh, or, with
launcher.no_ssh, one command per node (each started by hand or by srun) that joins at cluster.master_addr.

Over ssh the runner gives remote ranks none of launch.sh's exports, only some prefixes and a `.deepspeed_env` file's
lines: cluster.env and launcher.env go into the run dir's .deepspeed_env, and launch.sh points DS_ENV_FILE at it."""
import re
from typing import Dict, List, Tuple

from trl_ds.config.values import value
from trl_ds.rundir.layout import HOSTFILE, node_log_dir

from .hostfile import Host, check_against_cluster, default_hosts, read_hostfile, select_slots
from .shell_words import main_addr_word
from .torchrun import rank_module

# The runner strips each value and wraps it in double quotes for the remote shell when it holds other characters
# than these; inside double quotes `"`, `$`, backquote and backslash would still be read by that shell.
SAFE_OVER_SSH = re.compile(r'^[^"$`\\\n\r]*$')
NODE_PLACEHOLDER = "%n"  # pdsh writes each node's rank there (the runner's --node_rank=%n)


def load_hosts(cfg) -> Tuple[List[Host], str, List[str]]:
    """The hosts, where they came from, and every problem with them (file, line, cluster, include/exclude)."""
    c, launcher = cfg.cluster, cfg.launcher
    if c.hostfile:
        hosts, problems = read_hostfile(c.hostfile)
        origin = c.hostfile
    else:
        hosts, problems, origin = default_hosts(c.nodes, c.gpus_per_node), [], f"cluster={c.name}"
        if c.nodes > 1:
            origin += " (placeholder host names: name your nodes with cluster.hostfile=FILE)"
    if hosts:  # every problem at once: the file's bad lines, and what its good lines give against the cluster
        source = f"{origin} (its valid lines)" if problems else origin
        selected, filter_problems = select_slots(hosts, launcher.include, launcher.exclude, source)
        problems += filter_problems or check_against_cluster(hosts, selected, c.nodes, c.gpus_per_node, source)
    return hosts, origin, problems


def check_deepspeed_launcher(cfg) -> List[str]:
    """launcher=deepspeed's settings (launchers.py runs it when this launcher is chosen)."""
    launcher = cfg.launcher
    problems = load_hosts(cfg)[2]
    runner = value(launcher.multinode_runner)
    if runner != "pdsh" and not uses_ssh(cfg):
        problems.append(f"launcher.multinode_runner={runner} is how the deepspeed launcher starts several nodes from "
                        f"node 0 (launcher=deepspeed, cluster.nodes > 1, launcher.no_ssh=false). Remove it, or "
                        f"set those.")
    if runner not in ("pdsh", "slurm") and (launcher.include or launcher.exclude):
        problems.append(f"launcher.multinode_runner={runner} cannot pick hosts or slots (DeepSpeed refuses "
                        f"--include/--exclude with it). List the hosts in cluster.hostfile instead.")
    if uses_ssh(cfg):
        env = {**cfg.cluster.env, **cfg.launcher.env}
        problems += [f"launcher.env/cluster.env {name}={val!r}: over ssh the deepspeed runner passes variables "
                     f"through a remote shell, which would change a value holding a quote, $, backquote, backslash, "
                     f"line break or surrounding spaces. Use a plain value, or launcher.no_ssh=true."
                     for name, val in sorted(env.items()) if not SAFE_OVER_SSH.match(val) or val != val.strip()]
    if cfg.cluster.node_rank != 0 and not cfg.launcher.no_ssh:
        problems.append(f"cluster.node_rank={cfg.cluster.node_rank}: the deepspeed launcher starts every node from "
                        f"node 0 over ssh. Run it on node 0 (cluster.node_rank=0), or start each node yourself "
                        f"with launcher.no_ssh=true.")
    return problems


def build_deepspeed_command(cfg, run_dir: str, node_rank: int, per_node: bool) -> List[str]:
    c, launcher = cfg.cluster, cfg.launcher
    cmd = ["deepspeed", "--hostfile", f"{run_dir}/{HOSTFILE}", "--master_addr",
           main_addr_word(c.master_addr) if c.nodes > 1 else c.master_addr, "--master_port", str(c.master_port)]
    cmd += ["--include", launcher.include] if launcher.include else []
    cmd += ["--exclude", launcher.exclude] if launcher.exclude else []
    if per_node:
        cmd += ["--no_ssh", "--node_rank", str(node_rank)]
    elif c.nodes == 1:
        cmd += ["--no_ssh_check"]  # one host: DeepSpeed launches locally, so it needs no ssh to check
    elif value(launcher.multinode_runner) != "pdsh":
        cmd += ["--launcher", value(launcher.multinode_runner)]
    if launcher.launcher_args and uses_ssh(cfg):
        cmd += ["--launcher_args", launcher.launcher_args]
    # Rank logs are named by global rank; one folder per node (over ssh pdsh fills in each node's rank).
    log_dir = node_log_dir(run_dir, NODE_PLACEHOLDER if uses_ssh(cfg) else node_rank)
    return cmd + ["--enable_each_rank_log", log_dir, "--module", rank_module(cfg), run_dir]


def build_deepspeed_commands(cfg, run_dir: str) -> List[List[str]]:
    """With ssh, node 0's one command starts every node; with no_ssh, one command per node (index = node rank)."""
    if cfg.launcher.no_ssh:
        return [build_deepspeed_command(cfg, run_dir, rank, per_node=True) for rank in range(cfg.cluster.nodes)]
    return [build_deepspeed_command(cfg, run_dir, 0, per_node=False)]


def uses_ssh(cfg) -> bool:
    """With launcher=deepspeed: node 0's runner starts the nodes over ssh (pdsh), several nodes, no launcher.no_ssh.
    (Whatever the launcher, ask launchers.uses_ssh.)"""
    return cfg.cluster.nodes > 1 and not cfg.launcher.no_ssh


def selected_hosts(cfg) -> List[str]:
    """The hostfile's hosts in node-rank order, after include/exclude."""
    hosts, origin, _ = load_hosts(cfg)
    return list(select_slots(hosts, cfg.launcher.include, cfg.launcher.exclude, origin)[0])


def env_file_values(cfg, env: Dict[str, str]) -> Dict[str, str]:
    """What every rank gets through .deepspeed_env: the config's env, and for the runners that start ranks without
    DeepSpeed's per-node launch (MPI, srun) the main address, which that launch would have set."""
    if uses_ssh(cfg) and value(cfg.launcher.multinode_runner) != "pdsh":
        env = {"MASTER_ADDR": cfg.cluster.master_addr, "MASTER_PORT": str(cfg.cluster.master_port), **env}
    return env


def check_hostfile_unused(cfg) -> List[str]:
    """cluster.hostfile given to another launcher (launchers.py runs it when this launcher is not chosen)."""
    if not cfg.cluster.hostfile:
        return []
    return [f"cluster.hostfile={cfg.cluster.hostfile} is read by the deepspeed launcher only (launcher="
            f"{value(cfg.launcher.name)} here). Use launcher=deepspeed, or cluster.hostfile=null."]


# The command node 0 needs for each runner, and where it comes from.
RUNNER_TOOLS = {"pdsh": ("pdsh", "apt-get install pdsh"), "openmpi": ("mpirun", "apt-get install openmpi-bin"),
                "mpich": ("mpirun", "apt-get install mpich"), "impi": ("mpirun", "Intel MPI"),
                "mvapich": ("mpirun_rsh", "MVAPICH2"), "slurm": ("srun", "apt-get install slurm-client")}


def render_env_file(env: Dict[str, str]) -> str:
    """DeepSpeed's .deepspeed_env: one NAME=value line each (it splits at the first =; no blank lines)."""
    return "".join(f"{name}={val}\n" for name, val in sorted(env.items()))
