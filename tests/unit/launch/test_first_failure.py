"""The rank that failed first of its own accord is named on every launcher path, whatever order the exits were logged
in; the ranks that only lost it are named as consequences (#41).

The texts are a real run's (tests/data/pdsh_rank_exit, tests/data/mpirun_rank_exit_7_after_training.txt): two test
hosts, launcher=deepspeed over pdsh and over Open MPI, rank 1 on node 1 ending with os._exit(7) once step 1 was
logged (no traceback), rank 0 on node 0 failing in gloo's all_gather with "Connection reset by peer" from 10.88.0.2.
That pdsh run was stopped on rank 1's exit line; rank 0's line is node 1's line with node 0's host and code 1, as
DeepSpeed's launch.py writes it for any rank.
"""
import json
import shutil

import pytest
from conftest import REPO

from trl_ds.launch.failure import Failure, NodeView, describe, failed_rank_log, slurm_job_failure, write_failure
from trl_ds.launch.rank_exits import RankExit, first_own

DATA = REPO / "tests" / "data"
HOSTS = ["10.88.0.1", "10.88.0.2"]
NODE_1_EXIT = (DATA / "pdsh_rank_exit" / "node1_exit.txt").read_text().splitlines()[1] + "\n"
NODE_0_EXIT = NODE_1_EXIT.replace("10.88.0.2:", "10.88.0.1:").replace("= 7", "= 1")


def pdsh_run(tmp_path):
    for node in (0, 1):
        folder = tmp_path / "logs" / f"node_{node}"
        folder.mkdir(parents=True)
        shutil.copy(DATA / "pdsh_rank_exit" / f"rank{node}.log", folder / f"20261205204955_rank{node}.log")
    return NodeView(rank=0, nodes=2, gpus_per_node=1, log_dir=str(tmp_path / "logs" / "node_0"),
                    endpoint="10.88.0.1:29500", rdzv_timeout=900, ssh_hosts=HOSTS, starts_every_node=True,
                    hosts=HOSTS)


@pytest.mark.parametrize("order", ["rank 0's exit first", "rank 1's exit first"])
def test_pdsh_names_the_rank_that_left_and_rank_0_as_losing_it(tmp_path, order):
    node = pdsh_run(tmp_path)
    lines = [NODE_0_EXIT, NODE_1_EXIT] if order.startswith("rank 0") else [NODE_1_EXIT, NODE_0_EXIT]
    failure = describe("".join(lines), 1, node)
    log = tmp_path / "logs" / "node_1" / "20261205204955_rank1.log"
    assert failure == Failure(f"rank 1 (node 1, host 10.88.0.2, local rank 0) exited with code 7; its log: {log}; "
                              f"rank 0 (node 0) exited only on losing it", str(log))


def test_pdsh_with_only_the_rank_that_lost_its_peer_says_so_and_names_the_peers_node(tmp_path):
    """Node 1's launcher killed before it wrote its line: rank 0's is all there is."""
    failure = describe(NODE_0_EXIT, 1, pdsh_run(tmp_path))
    log = tmp_path / "logs" / "node_0" / "20261205204955_rank0.log"
    assert failure == Failure(f"rank 0 (node 0, host 10.88.0.1, local rank 0) exited with code 1 on losing a peer at "
                              f"10.88.0.2 (node 1) (Connection reset by peer), and no launcher reported the rank "
                              f"that left first; its log: {log}", str(log), own=False)


@pytest.mark.parametrize("reported", [1, 0])
def test_mpirun_names_the_rank_that_left_whichever_rank_it_reported(tmp_path, reported):
    """mpirun reports one rank, the first it saw end: the one that left (real), or rank 0, which only lost it."""
    output = (DATA / "mpirun_rank_exit_7_after_training.txt").read_text()
    if reported == 0:
        output = output.replace("[[32110,1],1]\n  Exit code:    7", "[[32110,1],0]\n  Exit code:    1")
    node = NodeView(rank=0, nodes=2, gpus_per_node=1, log_dir=str(tmp_path), endpoint="10.88.0.1:29500",
                    rdzv_timeout=900, starts_every_node=True, hosts=HOSTS)
    log = tmp_path / "launcher.log"
    said = {1: "rank 1 (node 1, host 10.88.0.2) exited with code 7",
            0: "rank 0 (node 0, host 10.88.0.1) exited with code 1 on losing a peer at 10.88.0.2 (node 1) "
               "(Connection reset by peer), and no launcher reported the rank that left first"}[reported]
    log.write_text(output)  # the shared output is where mpirun gathered every rank's lines
    assert describe(output, 1, node).message == f"{said}; its output is in {log}"


def torchrun_report(root, others=()):
    """torchrun's failure report (as in test_launch_failure.py): root and others are (rank, local, code)."""
    def entry(i, rank, local, code):
        return (f"[{i}]:\n  time      : 2026-12-05_20:50:42\n  host      : n0\n  rank      : {rank} (local_rank: "
                f"{local})\n  exitcode  : {code} (pid: 1)\n  error_file: <N/A>\n")
    failures = "".join(entry(i + 1, *o) for i, o in enumerate(others)) or "  <NO_OTHER_FAILURES>\n"
    return ("trl_ds.worker.train FAILED\n------------------------------------------------------------\nFailures:\n"
            + failures + "----\nRoot Cause (first observed failure):\n" + entry(0, *root) + "=====\n")


@pytest.mark.parametrize("root", [0, 1])
def test_torchrun_names_the_rank_that_left_whichever_it_observed_first(tmp_path, root):
    for rank in (0, 1):
        folder = tmp_path / "r_x" / "attempt_0" / str(rank)
        folder.mkdir(parents=True)
        shutil.copy(DATA / "pdsh_rank_exit" / f"rank{rank}.log", folder / "stderr.log")
    node = NodeView(rank=0, nodes=1, gpus_per_node=2, log_dir=str(tmp_path), endpoint="127.0.0.1:29500",
                    rdzv_timeout=60)
    exits = {0: (0, 0, 1), 1: (1, 1, 7)}
    failure = describe(torchrun_report(exits[root], [exits[1 - root]]), 1, node)
    log = tmp_path / "r_x" / "attempt_0" / "1" / "stderr.log"
    assert failure == Failure(f"rank 1 (node 0, local rank 1) exited with code 7; its log: {log}; rank 0 (node 0) "
                              f"exited only on losing it", str(log))


@pytest.mark.parametrize("nodes_order", [(0, 1), (1, 0)])
def test_across_nodes_the_summary_names_the_node_whose_rank_left(tmp_path, nodes_order):
    """Nodes started one by one (torchrun on each, srun python -m trl_ds under SLURM): each writes its failure.json;
    the run's summary takes the log of the rank that failed of its own accord, whichever node it is on."""
    own_node = nodes_order[1]
    for rank in (0, 1):
        folder = tmp_path / "logs" / f"node_{rank}"
        folder.mkdir(parents=True)
        node = NodeView(rank=rank, nodes=2, gpus_per_node=1, log_dir=str(folder), endpoint="a:1", rdzv_timeout=60)
        write_failure(node, Failure(f"rank {rank} ...", f"/logs/rank{rank}.log", own=rank == own_node))
    assert failed_rank_log(str(tmp_path)) == f"/logs/rank{own_node}.log"
    assert json.loads((tmp_path / "logs" / f"node_{own_node}" / "failure.json").read_text())["own"] is True


def test_one_rule_killed_signalled_or_silent_is_own_and_a_peer_error_or_the_launchers_signal_is_not(tmp_path):
    lost = tmp_path / "lost.log"
    lost.write_text((DATA / "pdsh_rank_exit" / "rank0.log").read_text())
    silent = tmp_path / "silent.log"
    silent.write_text((DATA / "pdsh_rank_exit" / "rank1.log").read_text())
    peer = RankExit(0, 1, "node 0", str(lost))
    ended = RankExit(2, -15, "node 0", None, ended_by_launcher=True)
    for cause in (RankExit(1, 7, "node 1", str(silent)), RankExit(1, -9, "node 1", None)):
        assert first_own([peer, ended, cause]) == (cause, [peer, ended])
    assert first_own([peer, ended]) == (peer, [ended])


@pytest.mark.parametrize("first", ["node 0's report first", "node 1's report first"])
def test_a_slurm_jobs_error_file_names_the_rank_that_left_whichever_node_reported_first(tmp_path, first):
    """launcher=slurm: srun gathers both nodes' torchrun reports into slurm-<job>.err, in the order they came."""
    for rank in (0, 1):
        folder = tmp_path / "logs" / f"node_{rank}" / "r_x" / "attempt_0" / "0"
        folder.mkdir(parents=True)
        shutil.copy(DATA / "pdsh_rank_exit" / f"rank{rank}.log", folder / "stderr.log")
    reports = [torchrun_report((0, 0, 1)), torchrun_report((1, 0, 7))]
    (tmp_path / "slurm-7.err").write_text("".join(reports if first.startswith("node 0") else reports[::-1]))
    log = tmp_path / "logs" / "node_1" / "r_x" / "attempt_0" / "0" / "stderr.log"
    assert slurm_job_failure(str(tmp_path), "7", 1) == Failure(
        f"rank 1 (node 1, local rank 0) exited with code 7; its log: {log}; rank 0 (node 0) exited only on losing "
        f"it", str(log))
    assert slurm_job_failure(str(tmp_path), "8", 1) is None  # no error file: nothing to name
