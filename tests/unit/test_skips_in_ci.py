"""#61: a test that cannot run on some machine skips through conftest.require_machine, which CI turns into a failure
unless CI's declared machine kind (TRL_DS_CI_MACHINE, cpu by default) explains the skip. Before, test_refusals_exit_2
called pytest.skip("this machine has GPUs") directly, and CI on a GPU machine went green without running it. A fake
nvidia-smi that lists one GPU makes this machine a GPU machine for the check (it asks nvidia-smi, as the
launch does)."""
import os
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # four pytest sessions (8 s each): make test runs them, make test-fast does not

NODE_0 = "tests/integration/test_refusals_exit_2.py::test_node_0_without_the_gpus_it_starts_ranks_on_exits_2"
CUDA_ONLY = "tests/unit/worker/test_gpu_cap.py::test_on_a_gpu_the_allocator_refuses_past_the_cap"


def pytest_run(test, tmp_path, **env):
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", **env}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", test], cwd=REPO,
                         capture_output=True, text=True, env=env, timeout=300)
    return out.stdout.strip().splitlines()[-1], out.stdout


@pytest.mark.parametrize("ci,outcome", [("false", "1 skipped"), ("true", "1 error")])
def test_a_no_gpu_test_on_a_gpu_machine(ci, outcome, tmp_path):
    last, text = pytest_run(NODE_0, tmp_path, CI=ci, TRL_DS_CI_MACHINE="cpu")
    assert last.startswith(outcome), text  # in CI: an error at setup, "missing in CI: ..."
    assert "needs a machine without GPUs (this one has some)" in text


@pytest.mark.parametrize("ci_machine,outcome", [("cpu", "1 skipped"), ("gpu", "1 error")])
def test_a_cuda_test_in_ci_skips_only_where_ci_says_it_has_no_gpu(ci_machine, outcome, tmp_path):
    last, text = pytest_run(CUDA_ONLY, tmp_path, CI="true", TRL_DS_CI_MACHINE=ci_machine)
    assert last.startswith(outcome), text
