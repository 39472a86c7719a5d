"""A refusal exits 2 on whichever node it happens (#41): launch.sh's own check of node 0's GPUs, and a rank that
refuses the config with worker/gpu_cap.py's one line. Before, node 0's launcher exited 1 for both."""
import os

import pytest
from conftest import REPO, read_json, run_app

from tests.integration.test_multinode import free_port
from trl_ds.worker.gpu_cap import cap_for

pytestmark = [pytest.mark.integration, pytest.mark.light]
# What apply_gpu_cap does on a CUDA rank given more than its GPU has, here without a GPU: its real line and exit code.
REFUSING_RANK = """
import os, sys
if "LOCAL_RANK" in os.environ:
    sys.stderr.write("GpuMemoryError: " + {line!r} + "\\n")
    sys.stderr.flush()
    os._exit(2)  # sys.exit in sitecustomize is caught by site; the worker itself calls sys.exit(2)
"""


@pytest.mark.no_gpu  # node 0 must have fewer GPUs than it starts ranks on
def test_node_0_without_the_gpus_it_starts_ranks_on_exits_2(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["cluster=1x1", "cluster.nodes=2", "cluster.node_rank=0", f"cluster.master_port={free_port()}"],
                  run_dir, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    host = os.uname().nodename
    assert (f"trl_ds: launch failed: node 0 ({host}) has 0 usable GPU(s) but the run starts 1 ranks per node "
            f"(cluster.gpus_per_node=1).") in out.stderr
    assert read_json(run_dir / "summary.json")["exit_code"] == 2


def test_a_rank_that_refuses_the_config_makes_the_launch_exit_2_with_its_line(tmp_path):
    line = cap_for(100000, 80 * 2 ** 30, "NVIDIA H100", 0).line
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(REFUSING_RANK.format(line=line))
    run_dir = tmp_path / "run"
    out = run_app(["cluster.gpus_per_node=1", f"cluster.master_port={free_port()}"], run_dir, timeout=300,
                  env={"PYTHONPATH": f"{site}{os.pathsep}{REPO}"})
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"trl_ds: launch failed: rank 0 (node 0, local rank 0) refused: GpuMemoryError: {line}\n" in out.stderr
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["exit_code"]) == ("failed", 2)
    assert summary["reason"].startswith(f"GpuMemoryError: {line}")
