"""Memory studies for real: Hydra sweeps of the tiny model on 2 CPU ranks (one torchrun launch per point), and
`trl-ds report` over them.

The tiny model is fp32 on CPU, so after an optimizer step each rank holds, per parameter (world 2):
  stage 0: 4 B params + 8 B Adam moments (no fp32 master: the params are fp32)          = 12 B
  stage 1, 2: 4 B params + (4 B master + 8 B moments) / 2; gradients freed after the step = 10 B
  stage 3: 4 B / 2 params + 4 B / 2 gradient partition + 6 B optimizer                    = 10 B
Its parameters are all below stage3_param_persistence_threshold, so the stage-3 sweep sets it to 0 (else every
parameter stays whole on every rank beside its partition).
"""
import csv
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, require

from tests.integration.test_multinode import free_port, tiny_model_dir

pytestmark = pytest.mark.integration
SWEEP_TIMEOUT_S = 1800
STAGE_SWEEP = ["zero=stage0,stage1,stage2,stage3", "zero.stage3_param_persistence_threshold=0"]
STAGE2 = ["zero=stage2", "zero.stage3_param_persistence_threshold=0"]  # the stage sweep's stage-2 point
# bytes per parameter after the step, by stage: (params, gradients, optimizer); see the module docstring
AFTER_STEP = {0: (4, 0, 8), 1: (4, 0, 6), 2: (4, 0, 6), 3: (2, 2, 6)}
BAD_DATASET = "no-such-user/no-such-dataset"  # passes validation; the ranks cannot load it (HF_HUB_OFFLINE=1)


def run_sweep(folder, args, env=None):
    cmd = [sys.executable, "-m", "trl_ds", "-m", *args, "trainer.max_steps=3", f"hydra.sweep.dir={folder}"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (folder / "sweep.stderr").write_text(out.stderr)  # what the terminal showed: one line per point
    return folder


def run_report(*args):
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli", "report", *map(str, args)], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def number(row, key):
    return float(row[key]) if row[key] else None


@pytest.fixture(scope="module")
def stage_sweep(tmp_path_factory):
    folder = run_sweep(tmp_path_factory.mktemp("stages") / "multirun", STAGE_SWEEP)
    printed = run_report(folder)
    return folder, read_csv(folder / "sweep.csv"), printed


def test_model_states_per_rank_fall_from_stage_0_to_3_as_estimated(stage_sweep):
    folder, rows, printed = stage_sweep
    assert [(r["zero"], r["status"]) for r in rows] == [(f"stage{s}", "completed") for s in range(4)]
    psi = int(rows[0]["parameters"])
    per_param = {}
    for stage, row in enumerate(rows):
        total = number(row, "est_model_states_bytes")
        for kind in ("params", "gradients", "optimizer"):  # estimated == measured within 1%, per component
            assert number(row, f"meas_{kind}_bytes") == pytest.approx(number(row, f"est_{kind}_bytes"),
                                                                      rel=0.01, abs=0.01 * total), (stage, kind)
        per_param[stage] = tuple(round(number(row, f"meas_{k}_bytes") / psi, 3)
                                 for k in ("params", "gradients", "optimizer"))
        assert number(row, "meas_model_states_bytes") == pytest.approx(total, rel=0.01)
    assert per_param == AFTER_STEP
    totals = [number(r, "meas_model_states_bytes") / psi for r in rows]
    assert [round(t, 3) for t in totals] == [12, 10, 10, 10]
    # the estimate's peak model states during a step (docs/memory-model.md), fp32 on 2 ranks, B per parameter:
    # stage 0: 4 weights + 4 gradients + 8 Adam = 16; stage 1: 4 + 4 (the whole gradient) + 12/2 = 14; stage 2: the
    # gradient partitioned, 4 + 4/2 + 6 = 12; stage 3: weights partitioned too, 4/2 + 6, plus the largest module
    # gathered with its gradient. The step's copy of the gradient partition (4/2) is below what the start of backward
    # holds (this tiny model's activations and logits), so no stage peaks at the step.
    largest = 65536  # the tiny model's embedding: vocab 256 x hidden 256
    peaks = [sum(number(r, f"est_peak_{k}_bytes") for k in ("params", "gradients", "optimizer")) / psi for r in rows]
    assert peaks == pytest.approx([16, 14, 12, 8 + 2 * 4 * largest / psi], abs=1e-3)
    # ZeRO-3's 16-bit gradient partition (4/2), resident after the step as measured, is among the estimate's buffers
    # (grad_partition_16bit), so the estimated peak never falls below the measured model states
    assert peaks[3] + number(rows[3], "est_peak_buffers_bytes") / psi >= totals[3]
    # No RSS check: on CPU ranks the estimated peak is mostly the rank-process constant (CPU_RANK_BYTES), itself
    # measured on this tiny run, so agreement here would prove nothing.
    assert "4 points: 4 completed." in printed
    assert (folder / "memory.png").read_bytes()[:4] == b"\x89PNG"


def test_a_failing_point_is_reported_failed_and_another_axis_sweeps(stage_sweep, tmp_path):
    """The dataset axis, its failing point first: the sweep goes on past it. The completed point is the stage
    sweep's stage-2 point at micro-batch 1 (2 by default), so the two sweeps' rows make the micro-batch axis."""
    folder = run_sweep(tmp_path / "multirun", [*STAGE2, "trainer.per_device_train_batch_size=1",
                                               f"trainer.dataset_name={BAD_DATASET},tiny"])
    lines = [line for line in (folder / "sweep.stderr").read_text().splitlines() if line.startswith("trl_ds sweep")]
    started = [line for line in lines if line.endswith(": started")]
    ended = [line for line in lines if line not in started][:-1]
    assert [line.split("]")[0] for line in started] == [f"trl_ds sweep [{i}/2" for i in range(1, 3)]
    assert [line.split("]")[0] for line in ended] == [f"trl_ds sweep [{i}/2" for i in range(1, 3)]
    assert [(" completed, final loss " in line, " failed, ConnectionError" in line) for line in ended] == [
        (False, True), (True, False)]  # job order: bad, then tiny
    assert " MiB/rank, " in ended[1]
    assert lines[-1].endswith(f"report: trl-ds report {folder} (writes {folder / 'sweep.md'})")
    run_report(folder)
    rows = read_csv(folder / "sweep.csv")
    by_point = {r["trainer.dataset_name"]: r for r in rows}
    assert {k: r["status"] for k, r in by_point.items()} == {"tiny": "completed", BAD_DATASET: "failed"}
    reason = by_point[BAD_DATASET]["reason"]
    assert reason.startswith(f"ConnectionError: Couldn't reach '{BAD_DATASET}' on the Hub"), reason
    one, two = by_point["tiny"], next(r for r in stage_sweep[1] if r["zero"] == "stage2")
    # the micro-batch axis: twice the tokens, twice the estimated activations; the model states do not change
    assert number(two, "est_peak_activations_bytes") == 2 * number(one, "est_peak_activations_bytes")
    assert number(one, "meas_model_states_bytes") == number(two, "meas_model_states_bytes")
    assert number(one, "final_loss") > 0 and number(two, "samples_per_second") > 0
    run_report(folder, stage_sweep[0], "--out", tmp_path / "both")
    assert len(read_csv(tmp_path / "both" / "sweep.csv")) == 6  # both sweeps in one table


def test_report_names_runs_with_a_missing_or_half_written_summary_and_reports_the_rest(stage_sweep, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(stage_sweep[0], copy, ignore=shutil.ignore_patterns("model", "final_model", "data", "logs",
                                                                        "trainer", "sweep.*", "memory.png"))
    (copy / "1" / "summary.json").write_text('{"status": "completed", "final_lo')
    (copy / "2" / "summary.json").unlink()
    printed = run_report(copy)
    rows = {r["point"]: r for r in read_csv(copy / "sweep.csv")}
    assert {p: r["status"] for p, r in rows.items()} == {"0": "completed", "1": "incomplete", "2": "incomplete",
                                                         "3": "completed"}
    assert rows["1"]["reason"].startswith("summary.json unreadable (")
    assert rows["2"]["reason"] == "summary.json missing"
    assert rows["0"]["meas_model_states_bytes"] == next(r for r in stage_sweep[1] if r["point"] == "0")[
        "meas_model_states_bytes"]
    assert "- 2 (zero=stage2 zero.stage3_param_persistence_threshold=0 trainer.max_steps=3): incomplete: " \
           "summary.json missing" in printed


def test_a_submitit_slurm_sweep_runs_every_point_as_a_two_node_slurm_job(slurm_env, tmp_path_factory,
                                                                         tmp_path):
    """hydra/launcher=submitit_slurm: each point is one SLURM job over both nodes; submitit runs the app on each
    node, which takes its node rank from SLURM. One job at a time (array_parallelism=1): the points share
    cluster.master_port, and both SLURM nodes are this machine."""
    require(importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None,
            "hydra-submitit-launcher is not installed: pip install -e '.[test]'")
    folder = run_sweep(tmp_path / "multirun", [
        "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2", "hydra.launcher.array_parallelism=1",
        "hydra.launcher.timeout_min=10", "zero=stage2,stage3", "zero.stage3_param_persistence_threshold=0",
        "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.master_port={free_port()}",
        f"model.name_or_path={tiny_model_dir(tmp_path_factory)}"], env=slurm_env)
    run_report(folder)
    rows = read_csv(folder / "sweep.csv")
    assert [(r["zero"], r["status"], r["world_size"]) for r in rows] == [("stage2", "completed", "2"),
                                                                        ("stage3", "completed", "2")]
    psi = int(rows[0]["parameters"])
    for row, stage in zip(rows, (2, 3)):
        measured = tuple(round(number(row, f"meas_{k}_bytes") / psi, 3) for k in ("params", "gradients", "optimizer"))
        assert measured == AFTER_STEP[stage]
        assert number(row, "meas_model_states_bytes") == pytest.approx(number(row, "est_model_states_bytes"),
                                                                       rel=0.01)
        for node in (0, 1):  # each SLURM node ran its share of the launch
            assert list((folder / row["point"] / "logs" / f"node_{node}").glob("*/attempt_0/0/stderr.log"))
    jobs = [p for p in (folder / ".submitit").iterdir() if p.is_dir() and "_" in p.name]  # <array>_<index>
    assert len(jobs) == 2 and all(len(list(job.glob("*_log.out"))) == 2 for job in jobs)  # 2 jobs x 2 tasks
