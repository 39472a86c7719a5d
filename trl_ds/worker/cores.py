"""How many threads a rank computes with."""
import os


def share_cores(env, torch) -> None:
    """Without OMP_NUM_THREADS, take this rank's share of the node's cores, as launch.sh gives the ranks it starts:
    ranks that a runner starts on other nodes (the deepspeed runner over pdsh, MPI) get no launch.sh there, and
    torch would give every rank all the cores."""
    if "OMP_NUM_THREADS" in env:
        return
    ranks = int(env.get("LOCAL_WORLD_SIZE") or env.get("LOCAL_SIZE") or 1)  # torchrun and MPI; deepspeed's launch
    share = max(len(os.sched_getaffinity(0)) // ranks, 1)
    env["OMP_NUM_THREADS"] = str(share)
    torch.set_num_threads(share)
