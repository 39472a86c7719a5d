"""The comparison itself can fail: a normalisation bug (a loss off by a factor) is caught."""
import json

import pytest

from trl_ds.study.equivalence import batch_shapes, compare, render_table, zero_points


def fake_run(path, losses, scale):
    import torch
    from safetensors.torch import save_file

    (path / "final_model").mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "loss": v}) + "\n"
                                                for i, v in enumerate(losses)))
    save_file({"w": torch.ones(4) * scale}, str(path / "final_model" / "model.safetensors"))
    return str(path)


def test_identical_runs_are_equivalent(tmp_path):
    runs = {"a": fake_run(tmp_path / "a", [2.0, 1.5], 1.0), "b": fake_run(tmp_path / "b", [2.0, 1.5 + 1e-7], 1.0)}
    result = compare(runs)
    assert result["equivalent"] and result["max_loss_deviation"] == pytest.approx(1e-7 / 1.5)
    assert "EQUIVALENT: max loss deviation 6.7e-08" in render_table(result)


def test_a_gradient_accumulation_bug_is_not_equivalent(tmp_path):
    runs = {"a": fake_run(tmp_path / "a", [2.0, 1.5], 1.0), "b": fake_run(tmp_path / "b", [2.0, 1.52], 1.001)}
    result = compare(runs)
    assert not result["equivalent"]
    assert result["max_weight_deviation"] == pytest.approx(1e-3, rel=1e-3)
    assert render_table(result).splitlines()[-1].startswith("NOT EQUIVALENT: max loss deviation 1.3e-02")


def test_shapes_keep_the_global_batch():
    for point in batch_shapes(8, [1, 2, 4]):
        ranks, micro, accum = (int(o.split("=")[1]) for o in point.overrides)
        assert ranks * micro * accum == 8, point
    assert [p.name for p in batch_shapes(8, [1, 2, 4])] == ["1×8×1", "1×2×4", "2×4×1", "4×2×1", "2×2×2"]
    assert [p.name for p in zero_points(8)] == ["stage0", "stage1", "stage2", "stage3", "stage2+cpu", "stage3+cpu"]
