"""script=: TRL's own installed sft.py, dpo.py, kto.py and rloo.py (not copies) train on 2 CPU ranks through trl_ds,
unchanged, and record what trl_ds's worker records, with the worker's losses at the same settings; a script that
trains no Trainer, one that fails, and one whose parser refuses its arguments end as docs/scripts.md says."""
import json
import math
import re
import shutil

import pytest
from conftest import read_json, run_app
from stage_runs import STEPS, stage_run  # as the other modules import it: one module, so one cache of runs
from test_imported_configs import users_files_run
from test_trainers import train

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


# TRL's other scripts, each launched once, for 3 steps: with a constant learning rate, steps 1-3 are those of the
# longer worker run the suite already makes at the same settings (stage_runs.py's stage3, test_trainers.py's
# dpo-stage3 and kto-stage2), which they are compared with. RLOO has no worker run: it is checked as test_trainers
# checks rloo.py at ZeRO-3.
SCRIPT_STEPS = 3
TRL_SCRIPTS = {
    "sft-stage3": ["script=trl.scripts.sft", "zero=stage3"],
    "dpo-stage3": ["script=trl.scripts.dpo", "trainer=dpo", "zero=stage3"],
    "kto-stage2": ["script=trl.scripts.kto", "trainer=kto", "zero=stage2"],
    "rloo-stage2": ["script=trl.scripts.rloo", "trainer=rloo", "zero=stage2"],
}
LIKE_A_WORKER_RUN = ["sft-stage3", "dpo-stage3", "kto-stage2"]
RESUMED = "sft-stage3"  # its last step is a checkpoint, which a copy of its run dir resumes from on another shape


def worker_run(name, tmp_path_factory):
    """The run dir of the worker's run at the script run's settings."""
    if name == "sft-stage3":
        return stage_run("stage3", tmp_path_factory)[0]
    return train(name, tmp_path_factory)[0]


@pytest.fixture(scope="module", params=list(TRL_SCRIPTS))
def trl_script_run(request, tmp_path_factory):
    """(name, run dir, CompletedProcess) of TRL's installed script (a module: the package's own file) for 3 steps."""
    run_dir = tmp_path_factory.mktemp(f"{request.param}-script") / "run"
    # the global batch set (4, as unset on 2 ranks), so a relaunch on another world size keeps it
    checkpoint = [f"checkpoint.every_steps={SCRIPT_STEPS}", "batch.global_size=4"] if request.param == RESUMED else []
    out = run_app([*TRL_SCRIPTS[request.param], f"trainer.max_steps={SCRIPT_STEPS}", *checkpoint], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return request.param, run_dir, out


def test_trl_scripts_are_recorded_like_worker_runs(trl_script_run):
    name, run_dir, out = trl_script_run
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed" and summary["script"] == TRL_SCRIPTS[name][0].split("=")[1]
    assert (summary["steps"], summary["world_size"], summary["global_batch"]) == (SCRIPT_STEPS, 2, 4)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "loss" in row]
    assert [row["step"] for row in rows] == list(range(1, SCRIPT_STEPS + 1))
    assert all(row["samples_per_second"] > 0 for row in rows)
    assert summary["final_loss"] == rows[-1]["loss"]
    assert re.search(rf"trl_ds: step \d/{SCRIPT_STEPS} \| epoch [\d.]+ \| loss -?\d\.\d{{4}} \|", out.stderr)
    stage = int(name[-1])
    for rank in (0, 1):
        assert (run_dir / f"progress/rank_{rank}.json").exists()
        memory = read_json(run_dir / f"memory/rank_{rank}.json")
        assert memory["deepspeed_config"]["zero_optimization"]["stage"] == stage
        assert sum(memory["model_states"]["optimizer"].values()) > 0
    assert (run_dir / "trainer" / "model.safetensors").exists()  # the script's own save, into the run dir


@pytest.mark.parametrize("trl_script_run", LIKE_A_WORKER_RUN, indirect=True)
def test_trl_scripts_train_like_the_worker(trl_script_run, tmp_path_factory):
    """They load the model by its path where the worker passes it loaded: the same weights, data, order, DeepSpeed JSON
    and trainer arguments, so the same losses to the last bit and the same engines (model states, reference)."""
    name, run_dir, _ = trl_script_run
    worker_dir = worker_run(name, tmp_path_factory)
    assert losses(run_dir) == losses(worker_dir)[:SCRIPT_STEPS]
    for rank in (0, 1):
        mine = read_json(run_dir / f"memory/rank_{rank}.json")
        theirs = read_json(worker_dir / f"memory/rank_{rank}.json")
        mine.pop("peak_rss_bytes"), theirs.pop("peak_rss_bytes")
        assert mine == theirs


@pytest.mark.parametrize("trl_script_run", [RESUMED], indirect=True)
def test_trl_sft_script_resumes_on_another_shape_to_the_uninterrupted_workers_losses(trl_script_run, tmp_path,
                                                                                      tmp_path_factory):
    """sft.py's 3 steps on 2 ranks at ZeRO-3, their run dir copied and relaunched on 1 rank (micro-batch 2 ×
    accumulation 2: the same global batch, 4) to step 6. The launcher converts checkpoint-3 to DeepSpeed's universal
    format, sft.py's engine loads it (load_universal, each Adam sub-group its own step), and all six steps equal the
    worker's uninterrupted 2-rank run's. A script changed nothing for this: it passes resume_from_checkpoint=None."""
    _, run_dir, _ = trl_script_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    out = run_app([*TRL_SCRIPTS[RESUMED], f"trainer.max_steps={STEPS}", f"checkpoint.every_steps={SCRIPT_STEPS}",
                   "cluster.gpus_per_node=1", "batch.global_size=4"], copy)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    checkpoint = copy / "trainer" / f"checkpoint-{SCRIPT_STEPS}"
    assert (f"trl_ds: {checkpoint} was written by world size 2 with ZeRO stage 3; this launch has world size 1 with "
            f"ZeRO stage 3: converted it to DeepSpeed's universal format in {checkpoint}/global_step{SCRIPT_STEPS}"
            "_universal; resuming from it") in out.stderr
    assert losses(copy) == pytest.approx(losses(worker_run(RESUMED, tmp_path_factory)), abs=1e-6)
    summary = read_json(copy / "summary.json")
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("completed", STEPS, 1)


@pytest.mark.parametrize("trl_script_run", ["rloo-stage2"], indirect=True)
def test_trl_rloo_script_at_zero2_scores_updates_and_keeps_a_whole_reference(trl_script_run):
    """As rloo.py at ZeRO-3 (test_trainers.py); below ZeRO-3 prepare_deepspeed gives the reference stage 0: a whole
    fp32 copy on each rank, the plan's bytes exactly, and the model states the plan's within 1 %."""
    _, run_dir, _ = trl_script_run
    rows = [row for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in row]
    assert rows[0]["kl"] == 0  # the policy before its first update is the reference
    for r in rows:
        assert 0 <= r["reward"] <= 1 and math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
        assert r["completions/max_length"] <= 4 and "kl" in r  # the preset's max_completion_length; beta 0.05
    assert all(r["kl"] > 0 for r in rows[1:])  # each update moved the policy away from its reference
    plan = read_json(run_dir / "plan.json")["current"]
    states = {kind: sum(v.values()) for kind, v in plan["after_step_bytes"].items()}
    for rank in (0, 1):
        memory = read_json(run_dir / f"memory/rank_{rank}.json")
        assert sum(memory["reference"].values()) == 4 * memory["parameters"] == 4 * 869_504
        assert {"cpu" if k == "device" else k: v for k, v in plan["reference_after_step_bytes"].items()} == \
            memory["reference"]
        for kind, held in memory["model_states"].items():  # within 1 %, as test_trainer_memory.py weighs the others
            assert sum(held.values()) == pytest.approx(states.get(kind, 0), rel=0.01, abs=0.01 * sum(states.values()))


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


def test_a_users_hf_argument_parser_script_trains_like_the_worker(tmp_path_factory):
    """Its parser gets TrainingArguments flags only (no max_length: SFTConfig's 1024 truncates nothing the tiny
    data holds, so the computation is the worker's), its own callback runs beside trl_ds's. The run is
    test_imported_configs' (the user's accelerate and DeepSpeed files too: the stage2 run's settings, by files)."""
    run_dir, _ = users_files_run(tmp_path_factory)
    worker_dir, _ = stage_run("stage2", tmp_path_factory)
    assert losses(run_dir) == losses(worker_dir)
    assert (run_dir / "trainer" / "my_steps.txt").read_text() == str(STEPS)
    summary = read_json(run_dir / "summary.json")
    assert summary["steps"] == STEPS and summary["script"] == str(user_train_py(tmp_path_factory))
    assert sorted(p.name for p in (run_dir / "memory").iterdir()) == ["rank_0.json", "rank_1.json"]
