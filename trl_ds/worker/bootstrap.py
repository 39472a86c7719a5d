"""One start-up for every rank trl_ds starts (its worker, a user's script, `fit`'s process): the venv's tools first on
PATH, DeepSpeed's shared memory freed at exit, op-lock waits, the process group, the GPU cap, the node's "joined"
mark, and the tiny model written once per node.
"""
import os

from trl_ds.op_locks import bound_op_lock_waits, waiting_file
from trl_ds.python_path import this_python_first
from trl_ds.rundir.layout import JOINED_FILE, PROGRESS_DIR, TINY_MODEL_DIR, node_log_dir, write_text
from trl_ds.worker.cores import share_cores
from trl_ds.worker.gpu_cap import apply_gpu_cap
from trl_ds.worker.shm_buffers import unlink_at_exit


def start_rank(run_dir: str, cfg, joins_a_launch: bool = True):
    """The accelerate state of this rank, in a started process group. joins_a_launch (not fit's one process): mark the
    node joined for the launcher's deadline; rank 0 forgets the files of ranks an earlier launch had."""
    os.environ["PATH"] = this_python_first(os.environ.get("PATH", ""))  # a rank started over ssh has the login PATH
    unlink_at_exit()  # DeepSpeed's shared-memory all-reduce buffer (shm_buffers.py)
    # DeepSpeed's ops load in this rank: a lock left behind is cleared, a held one waited on (and shown by the launcher)
    bound_op_lock_waits(waiting_file(os.path.join(run_dir, PROGRESS_DIR), int(os.environ.get("RANK", "0"))))
    state = init_distributed()
    apply_gpu_cap(cfg.cluster, state.local_process_index)  # cluster.gpu_memory_gb on a bigger GPU
    if joins_a_launch:
        from trl_ds.worker.records import forget_other_ranks

        mark_joined(run_dir, state)
        if state.is_main_process:
            forget_other_ranks(run_dir, state.num_processes)
    if cfg.model.name_or_path is None:
        prepare_tiny_model(cfg, run_dir, state)
    return state


def init_distributed():
    """Join the process group before any trainer config exists. On CPU accelerate would give every rank world size
    1; a PartialState built with gloo and `use_configured_state` in the trainer args makes the trainer use it."""
    import torch
    from accelerate import PartialState

    adopt_launcher_ranks(os.environ)
    share_cores(os.environ, torch)
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    return PartialState(backend="nccl" if torch.cuda.is_available() else "gloo")


# Rank variables of launchers that start ranks themselves (mpirun of Open MPI, MPICH/Intel MPI, MVAPICH; srun), for
# torch.distributed's env:// names; torchrun and DeepSpeed's per-node launch set those names already.
LAUNCHER_RANKS = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                         "SLURM_NTASKS_PER_NODE"),
}


def adopt_launcher_ranks(env) -> None:
    """Without RANK (MPI or srun started this rank): the ranks from their variables, node = rank // per node."""
    if "RANK" in env:
        return
    for name, sources in LAUNCHER_RANKS.items():
        found = next((env[s] for s in sources if s in env), None)
        if found is not None:
            env[name] = found
    if "RANK" in env and "LOCAL_WORLD_SIZE" in env:
        env.setdefault("CROSS_RANK", str(int(env["RANK"]) // int(env["LOCAL_WORLD_SIZE"])))


def mark_joined(run_dir: str, state) -> None:
    """Tell this node's launcher that the process group formed, which ends its join deadline (launch/run.py)."""
    if state.is_local_main_process:
        # launch.sh's node rank; else torchrun's and deepspeed's (ranks started over ssh get no launch.sh)
        env = os.environ
        node = int(env.get("TRL_DS_NODE_RANK") or env.get("GROUP_RANK") or env.get("CROSS_RANK") or 0)
        write_text(os.path.join(node_log_dir(run_dir, node), JOINED_FILE), f"{state.num_processes} ranks\n")


def prepare_tiny_model(cfg, run_dir: str, state) -> None:
    from trl_ds.worker.models import save_tiny_model

    if state.is_local_main_process:
        save_tiny_model(cfg.model, os.path.join(run_dir, TINY_MODEL_DIR), cfg.seed)
    state.wait_for_everyone()


