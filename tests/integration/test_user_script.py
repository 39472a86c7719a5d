"""script=: TRL's own installed sft.py (not a copy) trains on 2 CPU ranks at ZeRO-2 through trl_ds, unchanged, and
records what trl_ds's worker records; a script that trains no Trainer, one that fails, and one whose parser refuses
its arguments end as docs/scripts.md says."""
import json
import re

import pytest
from conftest import read_json, run_app

from tests.integration.stage_runs import STEPS, stage_run
from tests.integration.test_multinode import losses
from tests.integration.user_train import user_train_py

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sft_script_run(tmp_path_factory):
    """trl/scripts/sft.py by its file path, at the shared stage2 run's settings (worker: stage_runs.py)."""
    import trl.scripts.sft

    run_dir = tmp_path_factory.mktemp("sft_script") / "run"
    out = run_app([f"script={trl.scripts.sft.__file__}", "zero=stage2", f"trainer.max_steps={STEPS}"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out


def test_trl_sft_script_trains_like_the_worker(sft_script_run, tmp_path_factory):
    run_dir, _ = sft_script_run
    worker_dir, _ = stage_run("stage2", tmp_path_factory)
    # Same model (built from the seed), data, order, DeepSpeed JSON and trainer arguments: the same computation.
    assert len(losses(run_dir)) == STEPS
    assert losses(run_dir) == losses(worker_dir)


def test_the_script_run_is_recorded_like_a_worker_run(sft_script_run, tmp_path_factory):
    run_dir, out = sft_script_run
    worker_dir, _ = stage_run("stage2", tmp_path_factory)
    summary, worker = read_json(run_dir / "summary.json"), read_json(worker_dir / "summary.json")
    assert summary["status"] == "completed" and summary["script"].endswith("trl/scripts/sft.py")
    assert (summary["steps"], summary["world_size"], summary["distributed_type"]) == (STEPS, 2, "DEEPSPEED")
    assert summary["final_loss"] == losses(run_dir)[-1]
    assert summary["total_parameters"] == worker["total_parameters"]
    for rank in (0, 1):
        mine = read_json(run_dir / f"memory/rank_{rank}.json")
        theirs = read_json(worker_dir / f"memory/rank_{rank}.json")
        assert mine["model_states"] == theirs["model_states"]  # ZeRO-2's partition of the same engine
        assert (run_dir / f"progress/rank_{rank}.json").exists()
    assert re.search(rf"trl_ds: step \d/{STEPS} \| epoch [\d.]+ \| loss \d\.\d{{4}} \|", out.stderr)  # live line
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "loss" in row]  # the last row is train()'s end-of-training summary
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert all(row["samples_per_second"] > 0 for row in rows)
    assert (run_dir / "trainer" / "model.safetensors").exists()  # sft.py's own save, into the run dir


@pytest.mark.light
def test_a_script_argument_its_parser_rejects_is_refused_before_spawning(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["script=trl.scripts.sft", "script_args=[--learning_rate,fast]"], run_dir)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "trl_ds: script=trl.scripts.sft: its parser refused the arguments it would get (script_args=['--learning_rate',"
        " 'fast'] after the run dir's trainer arguments): sft.py: error: argument --learning_rate/--learning-rate: "
        "invalid float value: 'fast'. Fix script_args or the trainer keys."]
    assert not (run_dir / "logs").exists()  # no rank ever started


def test_a_script_without_a_trainer_completes_and_says_what_is_missing(tmp_path):
    script = tmp_path / "prepare.py"
    script.write_text("import os\nprint('prepared', os.environ['TRL_DS_RUN_DIR'])\n")
    run_dir = tmp_path / "run"
    out = run_app([f"script={script}"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed" and summary["trainers_trained"] == 0
    assert summary["missing"] == ["metrics.jsonl", "memory/rank_K.json", "final_loss", "samples_per_second"]
    assert "not recorded   metrics.jsonl, memory/rank_K.json, final_loss, samples_per_second: the script trained " \
           "no transformers Trainer" in out.stdout
    logs = sorted(run_dir.glob("logs/node_0/*/attempt_0/*/stdout.log"))
    assert [log.read_text().strip().splitlines()[-1] for log in logs] == [f"prepared {run_dir}"] * 2


def test_a_script_failing_on_a_rank_names_the_rank_its_error_and_its_log(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\nif os.environ['RANK'] == '1':\n    raise RuntimeError('no data for this rank')\n")
    run_dir = tmp_path / "run"
    out = run_app([f"script={script}"], run_dir)
    assert out.returncode == 1
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "failed"
    assert summary["reason"] == "RuntimeError: no data for this rank (launcher exited with code 1)"
    assert summary["log"].endswith("/attempt_0/1/stderr.log")  # torchrun's folder of global rank 1
    assert f"first failing rank's log: {summary['log']}" in out.stdout
    log = open(summary["log"]).read()
    assert f'File "{run_dir}/script/train.py", line 3' in log  # the run dir's copy ran
    assert "raise RuntimeError('no data for this rank')" in log


def test_a_users_hf_argument_parser_script_trains_like_the_worker(tmp_path, tmp_path_factory):
    """Its parser gets TrainingArguments flags only (no max_length: SFTConfig's 1024 truncates nothing the tiny
    data holds, so the computation is the worker's), its own callback runs beside trl_ds's."""
    script = user_train_py(tmp_path_factory)
    run_dir = tmp_path / "run"
    out = run_app([f"script={script}", "zero=stage2", f"trainer.max_steps={STEPS}",
                   "script_args=[--data_file,data/train.jsonl]"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    worker_dir, _ = stage_run("stage2", tmp_path_factory)
    assert losses(run_dir) == losses(worker_dir)
    assert (run_dir / "trainer" / "my_steps.txt").read_text() == str(STEPS)
    assert read_json(run_dir / "summary.json")["steps"] == STEPS
    assert sorted(p.name for p in (run_dir / "memory").iterdir()) == ["rank_0.json", "rank_1.json"]
