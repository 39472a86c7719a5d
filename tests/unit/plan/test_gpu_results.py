"""The planner's estimates, made now, against the H200 check's measurements (docs/gpu_check/results.json: one GPU,
bf16, world size 1, 8 steps of micro-batch 8 x 512 tokens). Every expected value is measured (the GPU's allocator,
the median logged step time); the code under test only supplies the estimate. The bounds are the claims
docs/gpu.md and docs/planner.md make:

- memory: peak reserved <= the estimated per-rank peak (the preflight must not call a config that needed more
  "fits"), and peak allocated >= half of it (not uselessly conservative);
- ZeRO-3's estimated peak above ZeRO-2's wherever the measured one is (live gathered parameters);
- step time: measured / estimated within [0.5, 2] for every run but the known limit (qwen2.5-0.5b's ZeRO-2, GPU
  under-utilisation of a small model that nothing in the model names), and the ZeRO-3 minus ZeRO-2 step time
  (the per-module cost fitted on these two differences) within [0.75, 1.33] of the measured difference per model.
"""
import json

import pytest
from conftest import REPO

from trl_ds.plan.memory import estimate, setup_from_config
from trl_ds.plan.planner import times_for

RESULTS = json.loads((REPO / "docs" / "gpu_check" / "results.json").read_text())
# what the check ran (tests/gpu/gpu_check.py gpu_mode on the H200: nvidia-smi's 139 GiB), with the presets' dimensions
COMMON = ["cluster=1x1", "cluster.gpu_memory_gb=139", "cluster.gpu=h200-141gb", "precision=bf16",
          "trainer.max_length=512", "trainer.per_device_train_batch_size=8", "trainer.max_steps=8"]
RUNS = [r for r in RESULTS["runs"] if r["status"] == "completed"]
# measured / estimated step time that the model does not explain (docs/gpu.md): the lower bound it stays above
KNOWN_STEP_MISSES = {"qwen2.5-0.5b_s2_none": 2.0}


def estimate_now(compose_cfg, run):
    cfg = compose_cfg([*COMMON, f"model={run['model']}", f"zero=stage{run['stage']}", f"offload={run['offload']}"])
    e = estimate(setup_from_config(cfg))
    return e, times_for(cfg, [e])[e.setup]


@pytest.fixture(scope="module")
def now():
    """run name -> (Estimate, StepTime) made with the current code."""
    from hydra.core.global_hydra import GlobalHydra

    from trl_ds.config.compose import compose

    out = {}
    for run in RUNS:
        out[run["name"]] = estimate_now(compose, run)
        GlobalHydra.instance().clear()
    return out


def test_the_check_ran_what_this_file_rebuilds():
    assert len(RUNS) == 7 and {r["model"] for r in RUNS} == {"llama3.2-1b", "qwen2.5-0.5b"}
    assert all(r["step"]["tokens_per_step"] == 8 * 512 and r["step"]["preset"] == "h200-141gb" for r in RUNS)
    assert all(r["memory"]["model_states_ratio"] == 1.0 for r in RUNS)  # model states were exact: same configs


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_memory_estimate_bounds_the_measured_peak(run, now):
    e, _ = now[run["name"]]
    m = run["memory"]
    assert e.verdict == "fits"  # it ran
    assert m["peak_reserved_bytes"] <= 1.0 * e.device_total
    assert m["peak_allocated_bytes"] >= 0.5 * e.device_total


@pytest.mark.parametrize("pair", RESULTS["zero3_vs_zero2"], ids=lambda z: f"{z['model']}_{z['offload']}")
def test_zero3_above_zero2_where_measured(pair, now):
    s2, s3 = (now[f"{pair['model']}_s{stage}_{pair['offload']}"][0].device_total for stage in (2, 3))
    if pair["measured_allocated_ratio"] > 1:
        assert s3 / s2 > 1


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_step_time_within_a_factor_of_two(run, now):
    ratio = run["step"]["measured_s"] / now[run["name"]][1].seconds
    if run["name"] in KNOWN_STEP_MISSES:  # still a miss: docs/gpu.md says so; if this fails, update the docs
        assert ratio > KNOWN_STEP_MISSES[run["name"]]
    else:
        assert 0.5 <= ratio <= 2.0


@pytest.mark.parametrize("model", ["llama3.2-1b", "qwen2.5-0.5b"])
def test_zero3_step_cost_matches_both_models(model, now):
    """The per-gathered-module cost (zero3_us_per_module) reproduces ZeRO-3 minus ZeRO-2 for both models."""
    by_name = {r["name"]: r for r in RUNS}
    measured = by_name[f"{model}_s3_none"]["step"]["measured_s"] - by_name[f"{model}_s2_none"]["step"]["measured_s"]
    estimated = now[f"{model}_s3_none"][1].seconds - now[f"{model}_s2_none"][1].seconds
    assert 0.75 <= estimated / measured <= 1.33
