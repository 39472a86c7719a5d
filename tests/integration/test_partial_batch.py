"""The issue's case (#33): 20 rows, global batch 8, 5 steps, the shapes (ranks×micro×accumulation) 1×8×1, 1×2×4,
2×4×1 and 2×2×2. Epochs end in a partial batch (20 = 2 × 8 + 4). The rows mix two sentence lengths, so padding and
per-token normalisation are under test too. Without trainer.dataloader_drop_last the shapes split it differently and
the check names the cause; with it, the train split is cut to whole global batches (trl_ds/worker/data.py) and every
shape, accumulation included, trains the same model: TRL's promise (the same losses and weights through other batch
shapes, fp32 on CPU), checked for real. Stages: test_training.

4×2×1 is not run: it splits the rows over ranks as 2×4×1 does (the same sampler and loss normalisation, 4 ranks
instead of 2) and costs two more rank processes on a 2-core machine. A dataset of equal-length rows is not run
either: after the cut the data is whole global batches, the case a multiple-of-the-batch dataset is, and equal lengths
only leave the padding out.
"""
import json

import pytest
from conftest import copy_op_cache
from lock_holder import stale_lock

from trl_ds.cli.main import main
from trl_ds.worker.data import tiny_sft_examples

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.xdist_group("beside")]
ROWS = 20
# fp32 on CPU: the same samples through other shapes differ only by summation order, ~1e-7 relative per step
# (measured: weights 1.8e-6 after 5 steps); stricter than the check's own WEIGHT_RTOL.
WEIGHT_RTOL = 1e-5


def check(tmp_path, name, points, steps, *overrides):
    data = tmp_path / "rows20.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in tiny_sft_examples(ROWS)))
    out = tmp_path / name
    code = main(["check-equivalence", "--out", str(out), "--points", points, "--steps", str(steps),
                 f"trainer.dataset_name={data}", *overrides])
    return code, json.loads((out / "equivalence.json").read_text()), (out / "equivalence.md").read_text()


# a run waiting on the lock below would hang: fail within minutes, not the suite's 20 (idle, the 4 runs take ~1 min;
# at a load of 22 on 2 cores 3 of them took 10)
@pytest.mark.timeout(900)
def test_drop_last_makes_every_shape_equivalent_accumulation_included(tmp_path, monkeypatch):
    """Before the cut, 1×2×4 and 2×2×2 stepped on a partial accumulation window at each epoch's end and parted from
    step 3 by 2.4e-5, then 1.7e-3 (the issue's table); 1×8×1, 2×4×1 and 4×2×1 agreed.
    Also beside a lock that a killed process left on DeepSpeed's shm_comm op, in torch's default folder (a copy of the
    built ops in ~/.cache, HOME the test's own): the first run's launch removes it, and every run trains."""
    cache = tmp_path / "home" / ".cache"
    lock = copy_op_cache(cache) / "deepspeed_shm_comm" / "lock"
    stale_lock(lock, cwd=tmp_path)
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")  # conftest's own_op_cache
    monkeypatch.setenv("HOME", str(cache.parent))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    code, result, table = check(tmp_path, "dropped", "1x8x1,1x2x4,2x4x1,2x2x2", 5, "trainer.dataloader_drop_last=true")
    assert code == 0 and result["equivalent"], table
    assert result["points"] == ["1×8×1", "1×2×4", "2×4×1", "2×2×2"]
    assert all(len(losses) == 5 for losses in result["losses"].values())  # 2 whole steps per epoch: 3rd epoch reached
    assert max(result["step_deviation"]) < 1e-6, table  # the same samples in every step: roundoff only
    assert result["max_weight_deviation"] < WEIGHT_RTOL, table
    assert result["losses"]["1×8×1"][-1] < result["losses"]["1×8×1"][0]  # and it learns
    log = (tmp_path / "dropped" / "1x2x4" / "logs").rglob("*")
    assert any("training on the first 16 of 20 rows (2 whole global batches of 8 per epoch)" in p.read_text()
               for p in log if p.is_file()), "the rank says which rows it trains on"
    assert not lock.exists()


def test_without_drop_last_the_partial_step_and_its_fix_are_named(tmp_path):
    code, result, table = check(tmp_path, "kept", "1x8x1,2x4x1,2x2x2", 3)
    assert code == 1 and not result["equivalent"]
    assert result["step_deviation"][0] < 1e-5 and result["step_deviation"][1] < 1e-5  # steps 1-2 agree
    assert result["step_deviation"][2] > 1e-5
    assert ("Cause: step 3 is the first to cross the end of the data (20 rows, global batch 8: 16 rows used, 4 left "
            "over), and 2×4×1 split that partial batch differently from 1×8×1 (as 2×2×2 do not); steps 1-2 agree."
            ) in table
    assert "Set trainer.dataloader_drop_last=true, or use a dataset whose size is a multiple of the global batch" \
        in table
    summary = json.loads((tmp_path / "kept" / "2x4x1" / "summary.json").read_text())  # the run's own summary says it
    assert summary["epoch_end"].startswith("each epoch ends in a partial batch: 20 rows = 2 × 8 + 4;")
