"""Epochs that end in a partial batch: said in the dry run and summary, and named as the cause of a divergence."""
import json

from tests.conftest import run_app
from trl_ds.config.partial_batch import boundary_steps, count_rows, epoch_end_text, explain_divergence


def test_rows_left_over_per_epoch():
    assert epoch_end_text(512, 4, False) is None  # the built-in data: 128 full batches
    assert epoch_end_text(None, 8, False) is None  # a hub dataset: unknown before loading
    assert epoch_end_text(20, 8, True) == ("every epoch trains on the first 16 of 20 rows, whole global batches of 8 "
                                           "(trainer.dataloader_drop_last=true; the last 4 are left out)")
    assert epoch_end_text(20, 8, False).startswith("each epoch ends in a partial batch: 20 rows = 2 × 8 + 4; its "
                                                   "last step takes the 4 rows left (with several ranks, 4 rows")
    assert boundary_steps(20, 8, 9) == [3, 6, 9]  # ceil(20 / 8) = 3 steps per epoch


def test_divergence_at_the_epoch_boundary_is_explained():
    # The numbers: 1×8×1 is the reference, 2×4×1 and 4×2×1 part at step 3, 1×2×4 does not.
    by_point = {"1×8×1": [0, 0, 0], "1×2×4": [1e-7, 1e-7, 1e-7], "2×4×1": [1e-7, 1e-7, 6.7e-3],
                "4×2×1": [0, 1e-7, 5e-3]}
    per_step = [max(v[i] for v in by_point.values()) for i in range(3)]
    assert explain_divergence(per_step, by_point, 20, 8, 1e-5) == (
        "Cause: step 3 is the first to cross the end of the data (20 rows, global batch 8: 16 rows used, 4 left over), "
        "and 2×4×1, 4×2×1 split that partial batch differently from 1×8×1 (as 1×2×4 do not); steps 1-2 agree. Not a "
        "trl_ds bug: the last batch of each epoch is split and padded across ranks by shape. Set "
        "trainer.dataloader_drop_last=true, or use a dataset whose size is a multiple of the global batch (e.g. 16 or "
        "24 rows).")
    # A divergence from step 1 on is something else: no such explanation.
    assert explain_divergence([1e-2, 1e-2, 1e-2], {"a": [0] * 3, "b": [1e-2] * 3}, 20, 8, 1e-5) is None
    assert explain_divergence(per_step, by_point, 24, 8, 1e-5) is None  # no partial batch at all


def test_dry_run_says_how_epochs_end(tmp_path):
    data = tmp_path / "rows20.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(20)))
    assert count_rows(str(data)) == 20
    out = run_app(["dry_run=true", f"trainer.dataset_name={data}", "batch.global_size=8"], tmp_path / "run",
                  timeout=120)
    assert out.returncode == 0, out.stderr
    assert "  epoch end: each epoch ends in a partial batch: 20 rows = 2 × 8 + 4;" in out.stdout


def test_rows_of_json_files_datasets_loads_are_counted(tmp_path):
    """A .json of JSON Lines and a JSON array after a BOM both load in datasets (tests/unit/check/test_data_readers.py);
    counting their rows for the dry run's epoch line raised json's error, a traceback instead of the dry run."""
    lines = tmp_path / "lines.json"
    lines.write_text('{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n')
    with_bom = tmp_path / "bom.json"
    with_bom.write_bytes(b'\xef\xbb\xbf[{"text": "a"},\n {"text": "b"}]')
    assert (count_rows(str(lines)), count_rows(str(with_bom))) == (3, 2)


def test_an_accumulation_shape_that_parts_is_named_too():
    """A shape with accumulation that parts at the partial batch (2×2×2 here, as when accelerate's even_batches fills
    one rank's short share of 18 rows from the epoch's start) is named like any other, with the same fix."""
    by_point = {"1×8×1": [0, 0, 0], "1×2×4": [1e-7, 1e-7, 1e-7], "2×2×2": [1e-7, 1e-7, 3e-3]}
    per_step = [max(v[i] for v in by_point.values()) for i in range(3)]
    assert explain_divergence(per_step, by_point, 18, 8, 1e-5).startswith(
        "Cause: step 3 is the first to cross the end of the data (18 rows, global batch 8: 16 rows used, 2 left over), "
        "and 2×2×2 split that partial batch differently from 1×8×1 (as 1×2×4 do not); steps 1-2 agree.")
    assert "Set trainer.dataloader_drop_last=true" in explain_divergence(per_step, by_point, 18, 8, 1e-5)


def test_with_drop_last_an_epoch_is_its_whole_global_batches_whatever_the_shape():
    """20 rows, global batch 8: 2 steps per epoch for every shape (the integration run of four shapes logs 5
    steps over 2.5 epochs); before the cut, 1×2×4 counted 3 (10 micro-batches, the last window of 2)."""
    from trl_ds.config.batch import Batch
    from trl_ds.config.training_steps import steps_per_epoch

    for micro, world, accumulation in ((8, 1, 1), (2, 1, 4), (4, 2, 1), (2, 4, 1), (2, 2, 2)):
        assert steps_per_epoch(20, Batch(micro, world, accumulation), drop_last=True) == 2
    assert steps_per_epoch(20, Batch(2, 1, 4), drop_last=False) == 3  # without it, the partial window is a step


def test_the_epoch_end_is_said_only_when_the_run_reaches_it(compose_cfg, tmp_path):
    """20 rows, global batch 8 (micro 2 × 2 ranks × accumulation 2): the partial batch is optimizer step 3 =
    ceil(ceil(ceil(20 / 2) / 2) / 2); trainer.max_steps=2 ends before it, so nothing is said."""
    from trl_ds.cli.app import build
    from trl_ds.launch.summary import epoch_end_of

    data = tmp_path / "rows20.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(20)))
    said = {}
    for steps in (2, 3):
        cfg = compose_cfg([f"trainer.dataset_name={data}", "batch.global_size=8", f"trainer.max_steps={steps}",
                           "trainer.gradient_accumulation_steps=2"])
        said[steps] = epoch_end_of(cfg, build(cfg, str(tmp_path / "run"), launching=False))
    assert said[2] is None
    assert said[3].startswith("each epoch ends in a partial batch: 20 rows = 2 × 8 + 4;")
