"""TRL's promise, checked for real: batch shapes give the same losses and weights (fp32, CPU); stages: test_training.
Mixed-length sequences (padding, per-token normalisation) through all five shapes, accumulation included:
test_partial_batch."""
import json

import pytest
from conftest import copy_op_cache
from lock_holder import stale_lock

from trl_ds.study.equivalence import main
from trl_ds.worker.data import tiny_sft_examples

pytestmark = pytest.mark.integration
# fp32 on CPU: the same samples through other shapes differ only by summation order, ~1e-7 relative per step.
LOSS_RTOL = WEIGHT_RTOL = 1e-5


def check(tmp_path, *args):
    out = tmp_path / "eq"
    code = main(["--out", str(out), *args])
    result = json.loads((out / "equivalence.json").read_text())
    return code, result


@pytest.mark.timeout(600)  # a run waiting on the lock below would hang: fail within minutes, not the suite's 20
def test_equal_length_sequences(tmp_path, monkeypatch):
    """Also beside a lock that a killed process left on DeepSpeed's shm_comm op, in torch's default folder (a copy
    of the built ops in ~/.cache, HOME the test's own): the first run's launch removes it, and every run trains."""
    cache = tmp_path / "home" / ".cache"
    lock = copy_op_cache(cache) / "deepspeed_shm_comm" / "lock"
    stale_lock(lock, cwd=tmp_path)
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")  # conftest's own_op_cache
    monkeypatch.setenv("HOME", str(cache.parent))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    data = tmp_path / "equal.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in tiny_sft_examples() if " plus " in e["text"]))
    code, result = check(tmp_path, "--points", "1x8x1,2x4x1", f"trainer.dataset_name={data}")
    assert code == 0, result
    assert result["max_loss_deviation"] < LOSS_RTOL and result["max_weight_deviation"] < WEIGHT_RTOL
    assert not lock.exists()
