"""ZeRO++'s hierarchical partitioning on its own (zero.zero_hpz_partition_size, no quantization) on 2 CPU ranks:
a secondary weight partition over 2 ranks trains to the plain ZeRO-3 run's losses and weights (the shared stage3 run).
hpZ changes where the all-gathers read from, not the math."""
import pytest
from conftest import read_json, run_app
from stage_runs import STEPS, stage_run

pytestmark = pytest.mark.integration


def test_hpz_trains_to_the_zero3_losses(tmp_path_factory):
    from trl_ds.study.equivalence import compare

    run_dir = tmp_path_factory.mktemp("hpz") / "run"
    out = run_app(["zero=stage3", "zero.zero_hpz_partition_size=2", f"trainer.max_steps={STEPS}"], run_dir)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert read_json(run_dir / "ds_config.json")["zero_optimization"]["zero_hpz_partition_size"] == 2
    baseline, _ = stage_run("stage3", tmp_path_factory)
    result = compare({"zero3": str(baseline), "hpz2": str(run_dir)})
    assert all(len(losses) == STEPS for losses in result["losses"].values()), result["losses"]
    assert result["max_loss_deviation"] < 1e-5 and result["max_weight_deviation"] < 1e-5, result
