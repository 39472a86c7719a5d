"""trl-ds report on synthetic run dirs: rows, estimated vs measured columns, incomplete runs, csv/md/png, the CLI
(`main`: the `trl-ds` command itself, in this process)."""
import csv
import importlib.util
import json

import pytest
import yaml
from conftest import require

from trl_ds.cli.main import main
from trl_ds.errors import ConfigError
from trl_ds.launch.summary import failure_reason, record_skipped
from trl_ds.plan.memory import CUDA_CONTEXT_BYTES
from trl_ds.study.points import read_point
from trl_ds.study.table import varying_keys

DEVICE = {"params": 400, "gradients": 600, "optimizer": 600, "activations": 50, "logits": 70, "buffers": 80,
          "overhead": 1000}


def plan(stage=2, device="cpu", after_step=None, host_total=None):
    device_total = sum(DEVICE.values())
    return {"cluster": {"device": device, "gpus_per_node": 2},
            "current": {"zero_stage": stage, "offload": "none", "device_bytes": dict(DEVICE),
                        "device_total_bytes": device_total,
                        "host_total_bytes": host_total if host_total is not None else 2 * device_total,
                        "after_step_bytes": after_step or {"params": {"device": 400}, "gradients": {},
                                                           "optimizer": {"device": 600}}}}


def rank(r, params=400, optimizer=604, rss=3000, **gpu):
    return {"rank": r, "peak_rss_bytes": rss, "parameters": 100,
            "model_states": {"params": {"cpu": params}, "gradients": {}, "optimizer": {"cpu": optimizer}}, **gpu}


def make_run(folder, overrides, status="completed", plan_=None, ranks=None, **summary):
    folder.mkdir(parents=True)
    (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    body = {"status": status, "world_size": 2, "final_loss": 5.25, "samples_per_second": 12.5, "train_seconds": 3.0,
            "wall_seconds": 20.0, **summary}
    (folder / "summary.json").write_text(json.dumps(body))
    if status != "skipped":
        (folder / "plan.json").write_text(json.dumps(plan_ or plan()))
    (folder / "memory").mkdir()
    for r in ranks if ranks is not None else ([rank(0), rank(1)] if status == "completed" else []):
        (folder / "memory" / f"rank_{r['rank']}.json").write_text(json.dumps(r))
    return folder


def test_a_completed_cpu_point_pairs_each_estimate_with_its_measurement(tmp_path):
    run = make_run(tmp_path / "0", ["zero=stage2"], plan_=plan(host_total=2 * 2800 + 200),
                   ranks=[rank(0, rss=3000), rank(1, optimizer=610, rss=3100)])
    row = read_point(str(run))
    assert (row["status"], row["zero_stage"], row["override_values"]) == ("completed", 2, {"zero": "stage2"})
    assert (row["est_params"], row["est_gradients"], row["est_optimizer"], row["est_model_states"]) == (400, 0, 600,
                                                                                                        1000)
    # the largest rank: optimizer 610 on rank 1, peak RSS 3100
    assert (row["meas_params"], row["meas_gradients"], row["meas_optimizer"]) == (400, 0, 610)
    assert (row["meas_model_states"], row["meas_peak"], row["peak_measure"]) == (1010, 3100, "cpu_rss")
    # CPU ranks: the rank's device terms (2800) plus its share of the node's offloaded states (200 / 2 ranks)
    assert (row["est_peak"], row["est_peak_offloaded"], row["est_peak_overhead"]) == (2900, 100, 1000)
    assert (row["final_loss"], row["samples_per_second"], row["wall_seconds"]) == (5.25, 12.5, 20.0)


def test_a_gpu_point_compares_torch_reserved_with_the_estimate_less_the_cuda_context(tmp_path):
    gpu_plan = plan(device="cuda")
    gpu_plan["current"]["device_bytes"] = {**DEVICE, "overhead": CUDA_CONTEXT_BYTES + 300}
    ranks = [rank(r, gpu_peak_allocated_bytes=2000 + r, gpu_peak_reserved_bytes=2500 + r) for r in (0, 1)]
    row = read_point(str(make_run(tmp_path / "0", ["zero=stage3"], plan_=gpu_plan, ranks=ranks)))
    assert (row["est_peak_overhead"], row["est_peak"]) == (300, 1800 + 300)
    assert (row["meas_peak"], row["gpu_peak_allocated"], row["peak_measure"]) == (2501, 2001, "gpu_reserved")


@pytest.mark.parametrize("content,reason", [(None, "summary.json missing"),
                                            ('{"status": "compl', "summary.json unreadable ("),
                                            ("null", "summary.json unreadable (not a JSON object)")])
def test_a_missing_or_half_written_summary_makes_the_point_incomplete(tmp_path, content, reason):
    run = make_run(tmp_path / "0", ["zero=stage1"])
    if content is None:
        (run / "summary.json").unlink()
    else:
        (run / "summary.json").write_text(content)
    row = read_point(str(run))
    assert row["status"] == "incomplete" and row["reason"].startswith(reason), row["reason"]
    # every figure that could be read is still reported
    assert (row["override_values"], row["est_model_states"], row["meas_peak"]) == ({"zero": "stage1"}, 1000, 3000)


def test_a_completed_run_missing_a_rank_file_is_incomplete_and_keeps_the_other_rank(tmp_path):
    row = read_point(str(make_run(tmp_path / "0", ["zero=stage1"], ranks=[rank(0, rss=2222)])))
    assert (row["status"], row["reason"]) == ("incomplete", "memory/rank_1.json missing")
    assert (row["meas_peak"], row["est_model_states"]) == (2222, 1000)


def test_skipped_and_failed_points_carry_their_reason(tmp_path):
    record_skipped(str(tmp_path / "0"), ["zero=stage2", "offload.param=cpu"], ConfigError(["needs stage 3"]))
    skipped = read_point(str(tmp_path / "0"))
    assert (skipped["status"], skipped["reason"], skipped["overrides"]) == ("skipped", "needs stage 3",
                                                                          "zero=stage2 offload.param=cpu")
    failed = read_point(str(make_run(tmp_path / "1", ["zero=stage3"], status="failed", reason="boom")))
    assert (failed["status"], failed["reason"], failed["est_model_states"], failed["meas_peak"]) == (
        "failed", "boom", 1000, None)


def test_a_failed_rank_s_reason_is_its_last_exception_line(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_text("[rank0]: Traceback (most recent call last):\n[rank0]:     raise ConnectionError(x)\n"
                   "[rank0]: ConnectionError: Couldn't reach 'no-such-user/no-such-dataset' on the Hub\n")
    assert failure_reason(str(log), 1) == ("ConnectionError: Couldn't reach 'no-such-user/no-such-dataset' on the "
                                           "Hub (launcher exited with code 1)")
    assert failure_reason(None, -9) == "launcher exited with code -9"


def test_varying_keys_are_the_sweep_axes():
    rows = [{"override_values": {"zero": f"stage{s}", "trainer.max_steps": "3"}} for s in (0, 1)]
    assert varying_keys(rows) == ["zero"]
    assert varying_keys(rows[:1]) == ["zero", "trainer.max_steps"]


def sweep(tmp_path):
    """A sweep folder: stages 0 and 3 completed, a failed point, a half-written summary, a folder Hydra made and
    the app never wrote in, and submitit's hidden folder."""
    folder = tmp_path / "multirun" / "10-00-00"
    make_run(folder / "0", ["zero=stage0"], plan_=plan(stage=0), ranks=[rank(0, rss=5000), rank(1, rss=5000)])
    make_run(folder / "1", ["zero=stage3"], plan_=plan(stage=3), ranks=[rank(0, rss=4000), rank(1, rss=4000)])
    make_run(folder / "2", ["zero=stage3", "trainer.dataset_name=x/y"], status="failed", reason="boom")
    (make_run(folder / "3", ["zero=stage1"]) / "summary.json").write_text("{")
    (folder / "10").mkdir()
    (folder / ".submitit").mkdir()
    return folder


def test_report_on_a_sweep_writes_csv_md_and_names_the_incomplete_runs(tmp_path, capsys):
    folder = sweep(tmp_path)
    assert main(["report", str(folder)]) == 0
    with open(folder / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["point"], r["zero"], r["status"]) for r in rows] == [
        ("0", "stage0", "completed"), ("1", "stage3", "completed"), ("2", "stage3", "failed"),
        ("3", "stage1", "incomplete"), ("10", "", "incomplete")]
    assert (rows[0]["est_model_states_bytes"], rows[0]["meas_model_states_bytes"], rows[0]["meas_peak_bytes"],
            rows[0]["cpu_peak_rss_bytes"]) == ("1000", "1004", "5000", "5000")
    md = (folder / "sweep.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")][1:]
    assert [line.split(" | ")[0] for line in table] == ["| 3", "| 1", "| 0", "| 2", "| 10"]  # by measured peak
    assert "5 points: 2 completed, 1 failed, 2 incomplete." in md
    assert "- 3 (zero=stage1): incomplete: summary.json unreadable (" in md
    assert "- 10 (no overrides): incomplete: summary.json missing" in md
    assert "- 2 (zero=stage3 trainer.dataset_name=x/y): failed: boom" in md
    assert md in capsys.readouterr().out


def test_report_on_several_folders_and_plain_run_dirs_writes_into_out(tmp_path, capsys):
    a = make_run(tmp_path / "outputs" / "a", ["zero=stage1"])
    b = make_run(tmp_path / "outputs" / "b", ["zero=stage2"])
    folder = sweep(tmp_path)
    assert main(["report", str(a), str(b), str(folder), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "sweep.csv") as f:
        points = [r["point"] for r in csv.DictReader(f)]
    assert points == ["outputs/a", "outputs/b", *(f"multirun/10-00-00/{n}" for n in (0, 1, 2, 3, 10))]
    assert main(["report", str(a), str(b)]) == 0  # plain run dirs only: the folder that holds them
    assert (tmp_path / "outputs" / "sweep.md").exists()


def test_report_refuses_a_path_that_holds_no_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/empty holds no run" in err and f"{tmp_path}/nowhere is not a folder" in err
    assert not (tmp_path / "empty" / "sweep.csv").exists()


def test_without_matplotlib_the_report_says_so_in_one_line_and_writes_csv_and_md(tmp_path, capsys, monkeypatch):
    folder = sweep(tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["report", str(folder)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "not installed" in line]
    assert lines == ["trl-ds report: matplotlib is not installed, so memory.png is not written "
                     "(pip install 'trl_ds[report]')"]
    assert (folder / "sweep.csv").exists() and (folder / "sweep.md").exists()
    assert not (folder / "memory.png").exists()


def test_memory_png_draws_the_points_with_figures(tmp_path, capsys):
    require(importlib.util.find_spec("matplotlib") is not None,
            "matplotlib is not installed: pip install -e '.[report]'")
    folder = sweep(tmp_path)
    assert main(["report", str(folder)]) == 0
    # stages 0 and 3, the failed point's estimate, the incomplete point's figures; not the empty folder
    assert f"wrote {folder}/memory.png (4 points)" in capsys.readouterr().out
    assert (folder / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_on_one_run_dir_writes_inside_it_and_nothing_beside_it(tmp_path, capsys):
    """Its parent holds other runs: a report written there would be overwritten by the next one's (#41)."""
    parent = tmp_path / "outputs" / "2026-12-05"
    run = make_run(parent / "10-00-00", ["zero=stage1"])
    make_run(parent / "11-00-00", ["zero=stage2"])
    assert main(["report", str(run)]) == 0
    assert (run / "sweep.csv").exists() and (run / "sweep.md").exists()
    assert sorted(p.name for p in parent.iterdir()) == ["10-00-00", "11-00-00"]
    with open(run / "sweep.csv") as f:
        assert [(r["point"], r["zero"]) for r in csv.DictReader(f)] == [("10-00-00", "stage1")]
    assert f"wrote {run}/sweep.csv and sweep.md" in capsys.readouterr().out


def test_report_out_gets_every_file_and_the_run_dir_none(tmp_path, capsys):
    """`trl-ds report RUN_DIR --out OUT`: loss.png went into the run dir, beside its metrics, instead of OUT (#61)."""
    require(importlib.util.find_spec("matplotlib") is not None,
            "matplotlib is not installed: pip install -e '.[report]'")
    run = make_run(tmp_path / "run", ["zero=stage1"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in (
        {"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}, {"step": 2, "eval_loss": 2.2})))
    before = sorted(p.name for p in run.iterdir())
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in run.iterdir()) == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["loss.png", "memory.png", "sweep.csv", "sweep.md"]
    assert (tmp_path / "out" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"trl-ds report: wrote {tmp_path}/out/loss.png (2 train, 1 eval points)" in capsys.readouterr().out


def test_report_takes_no_unknown_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(tmp_path), "--outt", "x"])
    assert exit_.value.code == 2
    assert "usage: trl-ds report" in capsys.readouterr().err
