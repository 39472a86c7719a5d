"""torchrun commands, one per node, with a static rendezvous so node 0 holds rank 0.

c10d would rank nodes by arrival (torchrun ignores --node_rank with it); static keeps rank 0, and so summary.json
and metrics.jsonl, on node 0. Static needs every node to reach cluster.master_addr:master_port, which node 0's
agent serves.
"""
from typing import List

from trl_ds.build.layout import node_log_dir

from .script import main_addr_word

WORKER_MODULE = "trl_ds.worker.train"


def build_torchrun_command(cfg, run_dir: str, node_rank: int) -> List[str]:
    c, launcher = cfg.cluster, cfg.launcher
    cmd = ["torchrun", "--nnodes", str(c.nodes), "--nproc_per_node", str(c.gpus_per_node)]
    if c.nodes == 1:
        # One node: let torchrun pick a free local port, so parallel runs never collide.
        cmd += ["--standalone"]
    else:
        # MAIN_ADDR: set by launch.sh from cluster.master_addr, or from SLURM when srun starts it.
        cmd += ["--node_rank", str(node_rank), "--master_addr", main_addr_word(c.master_addr),
                "--master_port", str(c.master_port)]
    cmd += ["--rdzv_conf", f"timeout={launcher.rdzv_timeout}", "--max_restarts", str(launcher.max_restarts)]
    return cmd + ["--log_dir", node_log_dir(run_dir, node_rank), "--redirects", "3", "-m", WORKER_MODULE, run_dir]


def build_node_commands(cfg, run_dir: str) -> List[List[str]]:
    """Every node's command; index = node rank."""
    return [build_torchrun_command(cfg, run_dir, rank) for rank in range(cfg.cluster.nodes)]
