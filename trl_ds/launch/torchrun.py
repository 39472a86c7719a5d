"""torchrun commands, one per node: a static rendezvous (the default) or torchrun's c10d one
(launcher.rdzv_backend=c10d).

Node 0's agent serves either at cluster.master_addr:master_port. static: node 0 holds rank 0 (summary.json and
metrics.jsonl are written there); every node needs its cluster.node_rank. c10d: nodes may start in any order, come
back after a max_restarts restart, and with launcher.min_nodes the run starts once that many are there; torch ranks
the nodes by the address each publishes ($LOCAL_ADDR), so rank 0 may sit on any node (a shared filesystem), and
cluster.node_rank still names each node's logs and lock."""
import hashlib
import os
from typing import List

from trl_ds.config.values import elastic_min_nodes, value
from trl_ds.rundir.layout import node_log_dir

from .shell_words import local_addr_word, main_addr_word

WORKER_MODULE = "trl_ds.worker.train"
SCRIPT_MODULE = "trl_ds.worker.script"  # script=: prepares the rank, then runs the user's script (worker/script.py)


def rank_module(cfg) -> str:
    """What each rank runs: trl_ds's worker, or the bootstrap of the user's script; either reads only the run dir."""
    return SCRIPT_MODULE if cfg.get("script") else WORKER_MODULE


def build_torchrun_command(cfg, run_dir: str, node_rank: int) -> List[str]:
    c, launcher = cfg.cluster, cfg.launcher
    cmd = ["torchrun", "--nnodes", nodes_arg(cfg), "--nproc_per_node", str(c.gpus_per_node)]
    timeout = launcher.rdzv_timeout
    if c.nodes == 1:
        # One node: let torchrun pick a free local port, so parallel runs never collide.
        cmd += ["--standalone", "--rdzv_conf", f"timeout={timeout}"]
    elif uses_c10d(cfg):
        # MAIN_ADDR, LOCAL_ADDR: set by launch.sh (from the config, the route to the main node, or SLURM).
        endpoint = main_addr_word(c.master_addr, suffix=f":{c.master_port}")
        # is_host: node 0 serves the store (torchrun's guess compares the endpoint with the hostname's addresses
        # only, and misses an address on another interface); read_timeout: how long the others wait for it to
        # appear (torchrun's default is 60 s).
        cmd += ["--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", rdzv_id(run_dir),
                "--local_addr", local_addr_word(), "--rdzv_conf",
                f"is_host={int(node_rank == 0)},join_timeout={timeout},read_timeout={timeout},"
                f"last_call_timeout={launcher.last_call_s}"]
    else:
        cmd += ["--node_rank", str(node_rank), "--master_addr", main_addr_word(c.master_addr),
                "--master_port", str(c.master_port), "--rdzv_conf", f"timeout={timeout}"]
    cmd += ["--max_restarts", str(launcher.max_restarts)]
    return cmd + ["--log_dir", node_log_dir(run_dir, node_rank), "--redirects", "3", "-m", rank_module(cfg), run_dir]


def build_node_commands(cfg, run_dir: str) -> List[List[str]]:
    """Every node's command; index = node rank."""
    return [build_torchrun_command(cfg, run_dir, rank) for rank in range(cfg.cluster.nodes)]


def uses_c10d(cfg) -> bool:
    return cfg.cluster.nodes > 1 and value(cfg.launcher.rdzv_backend) == "c10d"


def nodes_arg(cfg) -> str:
    """--nnodes: N, or MIN:MAX for an elastic c10d launch."""
    low = elastic_min_nodes(cfg)
    return f"{low}:{cfg.cluster.nodes}" if low else str(cfg.cluster.nodes)


def rdzv_id(run_dir: str) -> str:
    """The same on every node (they share the run dir and its launch.sh), another for another run dir."""
    return f"trl_ds-{os.path.basename(run_dir.rstrip('/'))}-{hashlib.sha1(run_dir.encode()).hexdigest()[:8]}"
