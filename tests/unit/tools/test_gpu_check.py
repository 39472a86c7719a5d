"""The GPU check's bookkeeping without a GPU: deadlines, killing a run's process tree, and the comparisons it reports.

The whole pipeline on a real CPU rank is tests/integration/test_gpu_check_smoke.py.
"""
import json
import os
import subprocess
import time

import pytest

from tests.gpu import gpu_check

GiB = 2 ** 30


@pytest.fixture
def check(tmp_path):
    return gpu_check.Check(str(tmp_path / "out"), str(tmp_path / "work"), gpu_check.cpu_mode(), time.time())


def test_differences_name_every_changed_key():
    written = {"a": 1, "zero_optimization": {"stage": 2, "overlap_comm": True}}
    used = {"a": 1, "zero_optimization": {"stage": 3, "overlap_comm": True}, "extra": "x"}
    assert gpu_check.differences(written, used) == ["extra: None written, 'x' used",
                                                   "zero_optimization.stage: 2 written, 3 used"]
    assert gpu_check.differences(written, json.loads(json.dumps(written))) == []


def test_step_time_is_the_median_gap_after_warmup_and_mfu_uses_the_presets_peak(check):
    # Steps 1-2 are warm-up; gaps between steps 3..6: 1.5, 1.0, 1.0 -> median 1.0 s.
    metrics = [{"step": i + 1, "time": t, "loss": 1.0} for i, t in enumerate([0.0, 5.0, 6.0, 7.5, 8.5, 9.5])]
    current = {"step_seconds": 0.8, "step_terms": {"compute": 0.5, "overhead": 0.3}, "micro_batch": 2}
    out = gpu_check.step_comparison(check, current, metrics, {"seq_len": 64})
    assert out["measured_s"] == 1.0 and out["steps_timed"] == 3
    assert out["measured_over_estimated"] == 1.25
    # plan/hardware/cpu.yaml: peak 0.03 TFLOP/s at efficiency 0.5, so 0.5 s of compute is 7.5e9 FLOPs; in 1.0 s: 25 %.
    assert out["flops_per_step"] == pytest.approx(7.5e9)
    assert out["mfu"] == 0.25
    assert out["tokens_per_step"] == 128


def test_zero3_over_zero2_pairs_runs_of_one_model_and_offload():
    def run(stage, offload, allocated, estimated):
        return {"model": "m", "stage": stage, "offload": offload, "status": "completed",
                "memory": {"peak_allocated_bytes": allocated, "peak_reserved_bytes": allocated + GiB,
                           "peak_rss_bytes": 1, "estimated_peak_bytes": estimated,
                           "measured_over_estimated_peak": 1.0}}

    runs = [run(2, "none", 10 * GiB, 9 * GiB), run(3, "none", 12 * GiB, 8 * GiB), run(3, "cpu", 5 * GiB, 4 * GiB)]
    assert gpu_check.zero3_vs_zero2(runs) == [{"model": "m", "offload": "none", "measured_allocated_ratio": 1.2,
                                               "measured_reserved_ratio": round(13 / 11, 3),
                                               "estimated_ratio": round(8 / 9, 3)}]


def test_no_run_starts_past_the_deadline_and_the_results_say_why(check):
    check.mode.start_deadline = -1
    check.results["models"]["tiny"] = {"status": "ok", "seconds": 1.0}
    gpu_check.run_all(check, "/nonexistent/python")  # would fail loudly if anything were started
    saved = json.loads(open(os.path.join(check.out, "results.json")).read())
    assert [(r["name"], r["status"], r["reason"]) for r in saved["runs"]] == [
        ("tiny_s2_none", "skipped", "past the -1 s start deadline"),
        ("tiny_s3_none", "skipped", "past the -1 s start deadline"),
        ("tiny_dpo_s3_none", "skipped", "past the -1 s start deadline")]
    report = open(os.path.join(check.out, "report.md")).read()
    assert "| tiny_s3_none | skipped: past the -1 s start deadline |" in report


def test_a_run_past_its_deadline_is_killed_with_what_it_started_in_other_sessions(tmp_path):
    pids = tmp_path / "pids"
    # torchrun starts its ranks in sessions of their own: the process group alone would miss them
    proc = gpu_check.start(["bash", "-c", f"setsid sleep 300 & echo $! > {pids}; sleep 300"], str(tmp_path / "log"))
    while not pids.exists() or not pids.read_text().strip():
        time.sleep(0.05)
    began = time.monotonic()
    assert gpu_check.finish(proc, time.monotonic() + 0.5) is None
    assert time.monotonic() - began < 20
    child = int(pids.read_text())
    time.sleep(0.2)
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True).stdout.strip()
    assert state == "" or state.startswith("Z"), state  # gone, or a zombie awaiting its reaper


def test_runs_whose_optimizer_op_did_not_build_are_skipped(check):
    check.mode.runs = [("tiny", 3, "cpu")]
    check.results["models"]["tiny"] = {"status": "ok", "seconds": 1.0}
    check.results["ops"]["cpu_adam"] = {"status": "failed", "seconds": 1.0}
    gpu_check.run_all(check, "/nonexistent/python")
    assert [(r["status"], r["reason"]) for r in check.results["runs"]] == [
        ("skipped", "DeepSpeed's cpu_adam did not build")]
    assert gpu_check.needed_op(gpu_check.gpu_mode(140), "none") == "fused_adam"
    assert gpu_check.needed_op(gpu_check.cpu_mode(), "none") is None


def test_the_op_builders_it_times_on_a_gpu_exist_in_deepspeed():
    from deepspeed.ops import op_builder

    compile(gpu_check.BUILD_OP, "BUILD_OP", "exec")
    assert all(hasattr(op_builder, name) for name in gpu_check.gpu_mode(140).ops.values())
    assert gpu_check.cpu_mode().ops == {}  # the smoke never rebuilds the shared extension cache


@pytest.mark.parametrize("trainer, stage", [("dpo", 2), ("dpo", 3), ("grpo", 2)])
def test_the_gpu_modes_dpo_and_grpo_runs_pass_trl_ds_checks_on_their_data(trainer, stage, tmp_path):
    """What would end a GPU run before training: the overrides, the long DPO pairs' columns, GRPO's batch rule."""
    from trl_ds.cli.app import build
    from trl_ds.config.compose import compose

    check = gpu_check.Check(str(tmp_path / "out"), str(tmp_path / "work"), gpu_check.gpu_mode(140), time.time())
    assert ("qwen2.5-0.5b", stage, "none", trainer) in check.mode.runs
    gpu_check.write_long_dataset(check)
    entry = {"name": gpu_check.run_name("qwen2.5-0.5b", stage, "none", trainer), "model": "qwen2.5-0.5b",
             "stage": stage, "offload": "none", "trainer": trainer}
    assert entry["name"] == f"qwen2.5-0.5b_{trainer}_s{stage}_none"
    # no model folder here: the preset's dimensions stand in for it
    overrides = [o for o in gpu_check.run_overrides(check, entry) if not o.startswith(("model.name_or_path=",
                                                                                         "hydra."))]
    prepared = build(compose(overrides), str(tmp_path / "run"), launching=False)  # raises ConfigError if refused
    assert prepared.ds_config["zero_optimization"]["stage"] == stage
    assert prepared.trainer_args["per_device_train_batch_size"] == 8
    if trainer == "dpo":
        with open(os.path.join(gpu_check.dataset_path(check, "dpo"), "train.jsonl")) as f:
            pair = json.loads(f.readline())
        assert set(pair) == {"prompt", "chosen", "rejected"}
        assert len(pair["prompt"].split()) == 256 and len(pair["chosen"].split()) == 1024  # max_length 512
    else:
        assert 8 % prepared.trainer_args["num_generations"] == 0  # TRL's rule: the batch holds whole groups


@pytest.mark.slow  # whole products or fresh interpreters: make test only
def test_every_fit_case_of_the_gpu_study_passes_trl_ds_fit_checks(tmp_path, monkeypatch):
    """What would end a case before its engine: the overrides fit_boundary.py gives `trl-ds fit`. The study runs on a
    machine with one GPU; this one has none, so fit's machine check is given that GPU count and every other check
    runs as there."""
    from tests.gpu import fit_boundary
    from trl_ds.check import validate
    from trl_ds.cli import fit as fit_cli

    monkeypatch.setattr(validate, "count_gpus", lambda: 1)

    mode = fit_boundary.gpu_mode()
    check = fit_boundary.FitCheck(str(tmp_path / "out"), str(tmp_path / "work"), mode, time.time())
    gpu_check.write_long_dataset(check)
    assert len(mode.cases) >= 4 and {c[1] for c in mode.cases} >= {16, 24} and {c[2] for c in mode.cases} == {2, 3}
    for model, gb, stage, offload in mode.cases:
        entry = {"name": fit_boundary.case_name(model, gb, stage, offload), "model": model, "gpu_memory_gb": gb,
                 "zero": stage, "offload": offload}
        command = fit_boundary.case_command(check, "python", entry)
        assert command[:5] == ["python", "-m", "trl_ds.cli", "fit", "cluster=1x1"]
        # no model folder here: the preset's dimensions stand in for it
        args = fit_cli.parse([a for a in command[4:] if not a.startswith("model.name_or_path=")])
        assert args.steps == 3 and args.json and args.run_dir == os.path.join(check.work, "runs", entry["name"])
        job = fit_cli.prepare(args)  # raises ConfigError for a refused override
        with open(os.path.join(job["run_dir"], "ds_config.json")) as f:
            config = json.load(f)
        assert config["zero_optimization"]["stage"] == stage
        assert config["train_micro_batch_size_per_gpu"] == max(job["planner_max_micro"], 1)
        assert (config["zero_optimization"].get("offload_optimizer", {}).get("device", "none") == offload)
