"""Launchers: pure builders of commands and scripts, plus `start`, the only function here that spawns.

The app calls the same things whatever the launcher: `build_commands` (every node's command, as argument lists
ending in the run dir), `write_launch_files` (launch.sh, and the hostfile or sbatch.sh) and `start`. launch.sh is
what runs everywhere: `start` runs it, srun runs it on each SLURM node, and a user can run it by hand on each node."""
import os
from typing import Dict, List

from trl_ds.config.values import offloads, value
from trl_ds.op_locks import clear_left_locks
from trl_ds.python_path import this_python_first
from trl_ds.rundir.layout import JOINED_FILE, LAUNCH_SCRIPT, node_log_dir, write_text

from .failure import NodeView
from .launchers import launch_env, launch_script_checks_gpus, launcher_of, pdsh_hosts, ssh_hosts, uses_ssh
from .script import render_launch_script
from .slurm import main_addr_from_slurm, under_slurm_job
from .torchrun import uses_c10d


def build_commands(cfg, run_dir: str) -> List[List[str]]:
    return launcher_of(cfg).build_commands(cfg, run_dir)


def render_launch_files(cfg, run_dir: str, node_commands: List[List[str]]) -> Dict[str, str]:
    """File name in the run dir -> text: launch.sh always, and the files its launcher reads (launchers.py). Pure."""
    launcher = launcher_of(cfg)
    files = {LAUNCH_SCRIPT: render_launch_script(node_commands, run_dir, launch_env(cfg), cfg.cluster.nodes,
                                                 cfg.cluster.gpus_per_node, launch_script_checks_gpus(cfg),
                                                 env_file=launcher.env_file)}
    return {**files, **launcher.files(cfg, run_dir)}


def write_launch_files(cfg, run_dir: str, node_commands: List[List[str]]) -> None:
    """Written whole, then renamed: with a shared run dir every node writes them, and bash reads a script as it
    runs, so another node must never truncate one under a running launch.sh."""
    for name, text in render_launch_files(cfg, run_dir, node_commands).items():
        path = os.path.join(run_dir, name)
        write_text(f"{path}.tmp-{os.getpid()}", text, mode=0o755 if name.endswith(".sh") else 0o644)
        os.replace(f"{path}.tmp-{os.getpid()}", path)


def placed_by_slurm(cfg) -> bool:
    """A multi-node launch inside a SLURM allocation: SLURM, not the config, says which node this is and which is
    the main one."""
    return cfg.cluster.nodes > 1 and under_slurm_job()


def this_node_rank(cfg) -> int:
    """Under a SLURM allocation SLURM says which node this is; otherwise cluster.node_rank."""
    if placed_by_slurm(cfg):
        return int(os.environ["SLURM_NODEID"])
    return cfg.cluster.node_rank


def main_addr(cfg) -> str:
    """Under a SLURM allocation the allocation's first node (as launch.sh computes it); otherwise
    cluster.master_addr."""
    if placed_by_slurm(cfg):
        return main_addr_from_slurm()
    return cfg.cluster.master_addr


def summarizes_here(cfg) -> bool:
    """Whether this process ends with the run's summary: not for a submitted job, nor on a node without rank 0."""
    return not launcher_of(cfg).submits and this_node_rank(cfg) == 0


def clear_left_op_locks(cfg) -> List[str]:
    """The op locks that killed loads left for this run's ops, removed at the launch edge (not while checking)."""
    return clear_left_locks(offloads(cfg).values(), value(cfg.cluster.device))


def start(cfg, node_commands: List[List[str]]) -> int:
    """A real launch (never a dry run or a plan): this node's share, or the submitted job."""
    run_dir = node_commands[0][-1]
    clear_left_op_locks(cfg)
    env = spawn_env()
    launcher = launcher_of(cfg)
    if launcher.submits:
        return launcher.submit(cfg, run_dir, env)
    from .run import run_node

    rank = this_node_rank(cfg)
    script = ["bash", os.path.join(run_dir, LAUNCH_SCRIPT)] + ([] if placed_by_slurm(cfg) else [str(rank)])
    node = NodeView(rank=rank, nodes=cfg.cluster.nodes, gpus_per_node=cfg.cluster.gpus_per_node,
                    log_dir=node_log_dir(run_dir, rank), endpoint=f"{main_addr(cfg)}:{cfg.cluster.master_port}",
                    rdzv_timeout=cfg.launcher.rdzv_timeout, ssh_hosts=pdsh_hosts(cfg),
                    starts_every_node=uses_ssh(cfg), hosts=ssh_hosts(cfg))
    rc = run_node(script, env, node, tell_peers=not uses_ssh(cfg),
                  progress=node_progress(cfg, run_dir, node))
    if rc == 0 and rank != 0:
        holder = "the node torch ranked first (c10d)" if uses_c10d(cfg) else "node 0"
        print(f"trl_ds: node {rank} done; rank 0 on {holder} writes summary.json and metrics.jsonl in its run dir")
    return rc


def node_progress(cfg, run_dir: str, node: NodeView):
    """Node 0 shows the run's progress; another node its own ranks' state. None with launcher.progress_every_s=0."""
    from .progress import NodeProgress, RunProgress

    every_s = cfg.launcher.progress_every_s
    if every_s <= 0:
        return None
    if node.rank == 0:
        return RunProgress(run_dir, every_s)
    return NodeProgress(node.rank, os.path.join(node.log_dir, JOINED_FILE), every_s)


def spawn_env() -> Dict[str, str]:
    """This environment, with this Python's folder first on PATH so torchrun, deepspeed and the SLURM job find the
    launchers installed beside it (the venv) even when it is not activated."""
    return {**os.environ, "PATH": this_python_first(os.environ.get("PATH", ""))}
