"""torchrun commands, one per node, with a static rendezvous so node 0 holds rank 0."""
from typing import List

WORKER_MODULE = "trl_ds.train"


def build_torchrun_command(cfg, run_dir: str, node_rank: int) -> List[str]:
    c = cfg.cluster
    cmd = ["torchrun", "--nnodes", str(c.nodes), "--nproc_per_node", str(c.gpus_per_node)]
    if c.nodes == 1:
        # One node: let torchrun pick a free local port, so parallel runs never collide.
        cmd += ["--standalone"]
    else:
        cmd += ["--node_rank", str(node_rank), "--master_addr", c.master_addr, "--master_port", str(c.master_port)]
    return cmd + ["--log_dir", f"{run_dir}/logs", "--redirects", "3", "-m", WORKER_MODULE, run_dir]


def build_node_commands(cfg, run_dir: str) -> List[List[str]]:
    """Every node's command; index = node rank."""
    return [build_torchrun_command(cfg, run_dir, rank) for rank in range(cfg.cluster.nodes)]
