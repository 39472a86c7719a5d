"""`trl-ds build-ops`'s arguments (its handling of op locks: tests/integration/test_op_locks.py)."""
import subprocess
import sys

from conftest import REPO


def test_unknown_op_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli", "build-ops", "fused_lamb"], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 2
    assert "unknown op fused_lamb; choose from deepspeed_shm_comm, pin_memory, cpu_adam, async_io" in out.stderr
