"""A dataset that is not a multiple of the global batch (20 rows, global batch 8): epochs end in a partial batch,
which 1×8×1 and 2×4×1 split differently. check_equivalence names that cause; with drop_last they are equivalent."""
import json

import pytest

from trl_ds.study.equivalence import main
from trl_ds.worker.data import tiny_sft_examples

pytestmark = pytest.mark.integration
POINTS = "1x8x1,2x4x1"


def check(tmp_path, name, *overrides):
    data = tmp_path / "rows20.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in tiny_sft_examples(20)))
    out = tmp_path / name
    # 3 steps: the third crosses the end of the data (16 rows used, 4 left).
    code = main(["--out", str(out), "--points", POINTS, "--steps", "3", f"trainer.dataset_name={data}", *overrides])
    return code, json.loads((out / "equivalence.json").read_text()), (out / "equivalence.md").read_text()


def test_partial_last_batch_is_named_and_drop_last_fixes_it(tmp_path):
    code, result, table = check(tmp_path, "kept")
    assert code == 1 and not result["equivalent"]
    assert result["step_deviation"][0] < 1e-5 and result["step_deviation"][1] < 1e-5  # steps 1-2 agree
    assert result["step_deviation"][2] > 1e-5
    assert ("Cause: step 3 is the first to cross the end of the data (20 rows, global batch 8: 16 rows used, 4 left "
            "over), and 2×4×1 split that partial batch differently from 1×8×1; steps 1-2 agree.") in table
    assert "Set trainer.dataloader_drop_last=true, or use a dataset whose size is a multiple of the global batch" \
        in table
    summary = json.loads((tmp_path / "kept" / "2x4x1" / "summary.json").read_text())  # the run's own summary says it
    assert summary["epoch_end"].startswith("each epoch ends in a partial batch: 20 rows = 2 × 8 + 4;")
    code, result, table = check(tmp_path, "dropped", "trainer.dataloader_drop_last=true")
    assert code == 0 and result["equivalent"], table
    assert "Cause" not in table
