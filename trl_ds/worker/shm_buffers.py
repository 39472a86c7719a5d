"""DeepSpeed's CPU all-reduce (deepspeed_shm_comm, every rank on one host) gives each rank a shared-memory buffer,
/dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>, and never unlinks it, so it stays
until reboot. Each rank unlinks its own at exit; the peers' mappings outlive the name.
"""
import atexit
import os

SHM = "/dev/shm"


def own_buffer(env=os.environ) -> str:
    return os.path.join(SHM, f"deepspeed_allreduce_buffer_{os.getuid()}_{env.get('MASTER_ADDR', '')}_"
                             f"{env.get('MASTER_PORT', '')}_{env.get('RANK', '0')}")


def unlink_at_exit() -> None:
    atexit.register(_unlink_own)  # named at exit: an MPI rank learns its RANK later (train.adopt_launcher_ranks)


def _unlink_own() -> None:
    try:
        os.unlink(own_buffer())
    except FileNotFoundError:  # ranks on several hosts: DeepSpeed made none
        pass
