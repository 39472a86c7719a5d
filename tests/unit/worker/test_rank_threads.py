"""A rank started without OMP_NUM_THREADS (by the deepspeed runner on another node, or mpirun) takes its share of the
node's cores, as launch.sh gives the ranks it starts; one that has it keeps it."""
import os

import pytest
import torch

from trl_ds.worker.cores import share_cores


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_ranks_without_omp_threads_share_the_cores(torch_threads):
    cores = len(os.sched_getaffinity(0))
    for env, share in (({"LOCAL_SIZE": "2"}, max(cores // 2, 1)),  # deepspeed's per-node launch, 2 ranks
                       ({"LOCAL_WORLD_SIZE": "1"}, cores),  # torchrun or MPI, one rank on the node
                       ({"LOCAL_WORLD_SIZE": str(4 * cores)}, 1)):  # never 0
        share_cores(env, torch_threads)
        assert (env["OMP_NUM_THREADS"], torch.get_num_threads()) == (str(share), share)


def test_a_set_omp_threads_is_kept(torch_threads):
    env = {"OMP_NUM_THREADS": "1", "LOCAL_SIZE": "8"}
    share_cores(env, torch_threads)
    assert env["OMP_NUM_THREADS"] == "1"
