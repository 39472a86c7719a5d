"""Reading a failed launch: which rank or node, which exit, which log (from torchrun's and DeepSpeed's own output)."""
import json
import os

from trl_ds.launch.failure import Failure, NodeView, describe, exit_text, failed_rank_log, never_reached, write_failure

TORCHRUN_FAILURE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
trl_ds.worker.train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_12:30:58
  host      : localhost
  rank      : 2 (local_rank: 0)
  exitcode  : -15 (pid: 16415)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 16415
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_12:30:58
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 16416)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 16416
============================================================
"""
DEEPSPEED_FAILURE = ("[2026-12-02 12:00:00,000] [ERROR] [launch.py:341:sigkill_handler] ['/venv/bin/python', '-u', "
                     "'-m', 'trl_ds.worker.train', '--local_rank=1', '/runs/r'] exits with return code = 7\n")


def node(tmp_path, rank=1):
    return NodeView(rank=rank, nodes=2, gpus_per_node=2, log_dir=str(tmp_path), endpoint="10.0.0.1:29500",
                    rdzv_timeout=30)


def test_torchrun_root_cause_names_the_rank_its_exit_and_log(tmp_path):
    log = tmp_path / "abc_x" / "attempt_0" / "1" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_text("boom\n")
    failure = describe("noise\n" + TORCHRUN_FAILURE, 1, node(tmp_path))
    # rank 2 got torchrun's SIGTERM once rank 3 had died: a consequence, named as one
    assert failure == Failure(f"rank 3 (node 1, local rank 1) exited with signal SIGKILL; its log: {log}; rank 2 "
                              f"(node 1) exited only on losing it", str(log))


def test_deepspeed_failure_names_the_global_rank_and_its_log(tmp_path):
    log = tmp_path / "20261202120000_rank3.log"
    log.write_text("Traceback\n")
    failure = describe(DEEPSPEED_FAILURE, 7, node(tmp_path))
    assert failure.message == f"rank 3 (node 1, local rank 1) exited with code 7; its log: {log}"


def test_rendezvous_timeout_names_the_missing_node(tmp_path):
    out = "torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. 1/2 clients joined.\n"
    failure = describe(out, 1, node(tmp_path, rank=0))
    assert failure.message.startswith("node 1 never joined: 1 of 2 nodes reached the rendezvous at 10.0.0.1:29500 "
                                      "within launcher.rdzv_timeout=30 s.")
    assert "3 of nodes 1..3 never joined: 1 of 4" in describe(out.replace("1/2", "1/4"), 1, node(tmp_path, 0)).message


def test_unreachable_main_node_from_torchrun_itself(tmp_path):
    out = ("torch.distributed.DistNetworkError: The client socket has timed out after 30000ms while trying to connect "
           "to (10.0.0.1, 29500).\n")
    assert describe(out, 1, node(tmp_path)) == never_reached(node(tmp_path))


def test_unknown_failure_points_at_the_launcher_output(tmp_path):
    failure = describe("deepspeed: command not found\n", 127, node(tmp_path))
    assert failure.message == (f"node 1: the launcher exited with code 127; its output is in "
                               f"{tmp_path}/launcher.log")


def test_never_reached_from_either_side(tmp_path):
    assert never_reached(node(tmp_path, 0)).message.startswith(
        "node 1 never joined: the rendezvous at 10.0.0.1:29500 was not complete within launcher.rdzv_timeout=30 s.")
    assert never_reached(node(tmp_path, 1)).message.startswith(
        "node 1 never joined: the main node's rendezvous at 10.0.0.1:29500 did not answer")


def test_exit_text():
    assert (exit_text(1), exit_text(-9), exit_text(-200)) == ("code 1", "signal SIGKILL", "signal 200")


def test_failed_rank_log_prefers_a_recorded_failure_then_a_traceback(tmp_path):
    run_dir = tmp_path
    node1 = run_dir / "logs" / "node_1"
    rank_log = node1 / "r_x" / "attempt_0" / "0" / "stderr.log"
    rank_log.parent.mkdir(parents=True)
    rank_log.write_text("Traceback (most recent call last):\n")
    assert failed_rank_log(str(run_dir)) == str(rank_log)
    (run_dir / "logs" / "node_0").mkdir()
    write_failure(node(str(run_dir / "logs" / "node_0"), 0), Failure("node 0 stopped its ranks because ..."))
    write_failure(node(str(node1)), Failure("rank 1 ...", "/somewhere/rank1.log"))
    assert failed_rank_log(str(run_dir)) == "/somewhere/rank1.log"
    with open(os.path.join(node1, "failure.json")) as f:
        assert json.load(f) == {"node": 1, "message": "rank 1 ...", "log": "/somewhere/rank1.log", "own": True}


def test_too_few_gpus_on_the_node_is_the_failure(tmp_path):
    line = ("node 1 (gpu-7) has 2 usable GPU(s) but the run starts 8 ranks per node (cluster.gpus_per_node=8). Run on "
            "nodes with 8 GPUs, or rebuild the run dir with cluster.gpus_per_node=2.")
    failure = describe(f"some launcher noise\ntrl_ds: {line}\n", 2, node(tmp_path))
    # The launcher's output goes to its log only: trl_ds's "launch failed:" line says launch.sh's line, once.
    assert (failure.message, failure.log) == (line, os.path.join(str(tmp_path), "launcher.log"))


def test_a_rank_that_refuses_the_config_is_a_refusal_said_in_its_one_line(tmp_path):
    """worker/gpu_cap.py's refusal (cluster.gpu_memory_gb above the GPU's memory): exit code 2 and one line; the
    launch then exits 2 too (launch/run.py), as for a refusal before launch (#41)."""
    from trl_ds.worker.gpu_cap import cap_for

    line = cap_for(100000, 80 * 2 ** 30, "NVIDIA H100", 0).line
    log = tmp_path / "abc_x" / "attempt_0" / "0" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"GpuMemoryError: {line}\n")
    report = TORCHRUN_FAILURE.replace("rank      : 3 (local_rank: 1)", "rank      : 0 (local_rank: 0)").replace(
        "exitcode  : -9", "exitcode  : 2")
    failure = describe(report.split("Failures:")[0] + "Root Cause" + report.split("Root Cause")[1], 1,
                       node(tmp_path, rank=0))
    assert failure == Failure("rank 0 (node 0, local rank 0) refused: GpuMemoryError: cluster.gpu_memory_gb=100000 "
                              "is more than this node's local GPU 0 (NVIDIA H100, 80.0 GiB): the plan assumed memory "
                              "this GPU does not have. Set cluster.gpu_memory_gb=80 (or less to rehearse a smaller "
                              "GPU).", str(log), refused=True)
    # the same exit code from a rank that only lost its peer is no refusal
    log.write_text("[rank0]: RuntimeError: Connection reset by peer\n")
    assert describe(report, 1, node(tmp_path, rank=0)).refused is False
