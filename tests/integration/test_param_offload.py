"""ZeRO-3 with the parameters offloaded to the CPU and the optimizer on the device (offload.param=cpu alone, a layout
DeepSpeed accepts and `trl-ds run --help` names): it composed, planned and trained nowhere before #59 (KeyError
'none/cpu' in the planner). One real 2-rank run, against stage_runs' ZeRO-3 run without offload: the same losses
and weights (offloading moves bytes, not math)."""
import math

import pytest
from conftest import read_json, run_app
from stage_runs import STEPS, stage_run

pytestmark = pytest.mark.integration


def test_zero3_with_parameters_offloaded_alone_trains_as_zero3(tmp_path, tmp_path_factory):
    from trl_ds.study.equivalence import compare

    run_dir = tmp_path / "run"
    out = run_app(["zero=stage3", "offload.param=cpu", f"trainer.max_steps={STEPS}"], run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    zero = read_json(run_dir / "ds_config.json")["zero_optimization"]
    assert (zero["stage"], zero["offload_param"]["device"], "offload_optimizer" in zero) == (3, "cpu", False)
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed" and summary["steps"] == STEPS and math.isfinite(summary["final_loss"])
    assert read_json(run_dir / "plan.json")["current"]["offload"] == "none/cpu"
    result = compare({"param-cpu": str(run_dir), "stage3": str(stage_run("stage3", tmp_path_factory)[0])})
    assert all(len(losses) == STEPS for losses in result["losses"].values()), result["losses"]
    assert result["max_loss_deviation"] < 1e-5 and result["max_weight_deviation"] < 1e-5, result
