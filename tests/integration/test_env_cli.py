"""`trl-ds env` as a command: a fresh process that imports torch and DeepSpeed and probes the ops (seconds; moved
from tests/unit/launch/test_env.py, whose torch-free part stays there)."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.light]


def test_cli_reports_ops_backends_and_devices(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli", "env", "--json", "--nvme-path", str(tmp_path / "nvme")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    env = json.loads(out.stdout)
    probe = env["probe"]
    assert probe["distributed"]["gloo"] is True
    assert set(probe["deepspeed_ops"]) == {"cpu_adam", "async_io", "fused_adam"}
    assert all(set(op) == {"installed", "cached", "compatible", "locked"} for op in probe["deepspeed_ops"].values())
    assert probe["deepspeed_ops"]["cpu_adam"]["compatible"] is True  # g++ and torch headers are here
    libaio = env["libaio"]["library"] is not None and env["libaio"]["header"]
    assert probe["deepspeed_ops"]["async_io"]["compatible"] == libaio
    import torch

    assert probe["torch"] == torch.__version__ and len(probe["devices"]) == torch.cuda.device_count()


def test_cli_text_names_every_topic():
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli", "env"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    for topic in ("packages:", "GPUs (nvidia-smi):", "libaio (NVMe offload):", "SLURM:", "NVMe path",
                  "distributed backends: gloo yes", "cpu_adam   installed"):
        assert topic in out.stdout, topic
