"""offload.ratio on real ranks: DeepSpeed's partial optimizer offload (stage 3, CPU) trains to the same losses as the
full offload (ratio moves memory, not math). 2 CPU ranks, the shared stage3-cpu run as the baseline. The same run
carries a top-level DeepSpeed key through deepspeed.* (wall_clock_breakdown), which the engine honours in its log.

On CPU ranks DeepSpeed's accelerator is itself named 'cpu', so the sub-groups that a GPU would keep are stepped by the
same CPU Adam (stage3.py `subgroup_to_device`); this run shows the engine accepts the split and builds its hybrid
optimizer, and that the losses do not move. The device/host split of the bytes is trl_ds/plan/precision_bytes.py's.
"""
import pytest
from conftest import read_json, run_app
from stage_runs import STEPS, stage_run

pytestmark = pytest.mark.integration

# ~0.5M parameters per rank in sub-groups of 100k elements: several sub-groups, so a ratio of 0.5 splits them.
RATIO = ["zero=stage3", "offload=cpu", "offload.ratio=0.5", "zero.sub_group_size=100000",
         "+deepspeed.wall_clock_breakdown=true"]


def rank_logs(run_dir) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("logs/**/*.log")))


def test_offload_ratio_trains_to_the_full_offload_losses(tmp_path_factory):
    from trl_ds.study.equivalence import compare

    run_dir = tmp_path_factory.mktemp("ratio") / "run"
    out = run_app([*RATIO, f"trainer.max_steps={STEPS}"], run_dir)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    offload = read_json(run_dir / "ds_config.json")["zero_optimization"]["offload_optimizer"]
    assert offload == {"device": "cpu", "pin_memory": True, "ratio": 0.5}
    baseline, _ = stage_run("stage3-cpu", tmp_path_factory)
    # DeepSpeed's engine logs its step timers ("time (ms) | ...") only with wall_clock_breakdown
    assert "time (ms)" in rank_logs(run_dir) and "time (ms)" not in rank_logs(baseline)
    # the plan's model states (device and host parts of the split together: on CPU ranks DeepSpeed's 'device' is the
    # CPU) against what the engine holds after training, within 1% per kind, as test_memory_measured.py holds them
    plan = read_json(run_dir / "plan.json")["current"]
    assert plan["offload_ratio"] == 0.5 and set(plan["after_step_bytes"]["optimizer"]) == {"device", "host"}
    estimated = {k: sum(v.values()) for k, v in plan["after_step_bytes"].items()}
    for r in (0, 1):
        held = {k: sum(v.values()) for k, v in read_json(run_dir / "memory" / f"rank_{r}.json")["model_states"].items()}
        for kind, nbytes in held.items():
            assert nbytes == pytest.approx(estimated.get(kind, 0), rel=0.01, abs=0.01 * sum(estimated.values())), \
                (r, kind, held, estimated)
    result = compare({"ratio-1": str(baseline), "ratio-0.5": str(run_dir)})
    assert all(len(losses) == STEPS for losses in result["losses"].values()), result["losses"]
    assert result["max_loss_deviation"] < 1e-5 and result["max_weight_deviation"] < 1e-5, result
