"""On a CUDA GPU only (skipped without): the cap of cluster.gpu_memory_gb in a real run, its refusal, and `trl-ds fit`
meeting a real out-of-memory error. The tiny model keeps each under a minute after DeepSpeed's fused Adam is built.
The CPU side of all three is in tests/unit/worker/test_gpu_cap.py, test_fit_search.py and test_gpu_check_smoke.py."""
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, read_json

pytestmark = [pytest.mark.gpu, pytest.mark.integration]  # gpu: conftest.require_machine skips it without CUDA
TINY_GPU = ["cluster=1x1", "precision=bf16", "trainer.max_length=512", "trainer.max_steps=2", "save_final_model=false"]


def trl_ds(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_a_run_below_the_gpus_memory_is_capped_and_records_it(tmp_path):
    out = trl_ds("trl_ds", *TINY_GPU, "cluster.gpu_memory_gb=4", f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    cap = read_json(tmp_path / "run" / "memory" / "rank_0.json")["gpu_cap"]
    assert cap["gpu_memory_gb"] == 4 and cap["cap_bytes"] in (4 * 2 ** 30, 4 * 2 ** 30 - 1)
    assert cap["fraction"] == pytest.approx(4 * 2 ** 30 / cap["device_total_bytes"])


def test_more_than_the_gpu_has_ends_the_run_with_one_line(tmp_path):
    out = trl_ds("trl_ds", *TINY_GPU, "cluster.gpu_memory_gb=100000", f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode != 0
    reason = read_json(tmp_path / "run" / "summary.json")["reason"]
    assert reason.startswith("GpuMemoryError: cluster.gpu_memory_gb=100000 is more than this node's local GPU 0"), \
        reason
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")  # stopped before training


def test_fit_meets_a_real_out_of_memory_error_and_trains_on(tmp_path):
    # Full-length samples (the built-in ones are a dozen tokens): 1024 words of the tiny vocabulary, cut to 512
    (tmp_path / "data").mkdir()
    text = " ".join(["question", ":", "what", "is", "one", "plus", "two", "?"] * 128)
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(64)))
    out = trl_ds("trl_ds.cli", "fit", "cluster=1x1", "precision=bf16", "trainer.max_length=512",
                 f"trainer.dataset_name={tmp_path / 'data'}", "cluster.gpu_memory_gb=1", "--steps", "2",
                 "--run-dir", str(tmp_path / "fit"), "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    fit = json.loads(out.stdout)
    statuses = {t["status"] for t in fit["trials"]}
    assert "oom" in statuses and "error" not in statuses, fit["trials"]
    assert fit["measured_max_micro"] >= 1 and fit["smallest_oom_micro"] == fit["measured_max_micro"] + 1
    assert fit["at_max"]["status"] == "trained" and fit["at_max"]["peak_reserved_bytes"] <= 2 ** 30
    assert fit["reserved_over_estimate"] > 0
