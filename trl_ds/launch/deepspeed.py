"""The deepspeed launcher: one command on node 0 that reaches the other hosts over ssh/pdsh, or, with
launcher.no_ssh, one command per node (each started by hand or by srun) that joins at cluster.master_addr."""
from typing import List, Tuple

from trl_ds.build.layout import HOSTFILE, node_log_dir
from trl_ds.config.values import value

from .hostfile import Host, check_against_cluster, default_hosts, read_hostfile, select_slots
from .script import main_addr_word
from .torchrun import WORKER_MODULE


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
    if value(cfg.launcher.name) != "deepspeed":
        return []
    problems = load_hosts(cfg)[2]
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
    # Rank logs are named by global rank, so one folder per node holds them without clashes.
    return cmd + ["--enable_each_rank_log", node_log_dir(run_dir, node_rank), "--module", WORKER_MODULE, run_dir]


def build_deepspeed_commands(cfg, run_dir: str) -> List[List[str]]:
    """With ssh, node 0's one command starts every node; with no_ssh, one command per node (index = node rank)."""
    if cfg.launcher.no_ssh:
        return [build_deepspeed_command(cfg, run_dir, rank, per_node=True) for rank in range(cfg.cluster.nodes)]
    return [build_deepspeed_command(cfg, run_dir, 0, per_node=False)]
