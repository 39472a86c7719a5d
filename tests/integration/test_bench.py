"""The benchmark is not a test of speed (this machine is shared and noisy); `make test` only checks that the quick
mode runs end to end and that its table says what it measured."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration


def test_bench_quick_runs(tmp_path):
    out_md = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, "scripts/bench.py", "--quick", "--out", str(out_md)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "bench.json").read_text())
    assert [r["trl_ds_exit"] for r in result["errors"]] == [2, 2, 2]
    first = result["errors"][0]
    assert first["baseline_caught"] and first["baseline_s"] > first["trl_ds_s"]
    assert "| batch size mismatch |" in out_md.read_text()
    assert set(result["latency"]) >= {"deepspeed --help", "trl_ds.plan (llama3-70b, 1x8, default grid)"}
