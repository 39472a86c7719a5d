"""script=: what trains is what trl_ds says (docs/scripts.md). A script that builds its engine from another DeepSpeed
file than the run dir's is named at the end, in summary.json and in each rank's memory file; a parser in a helper
module gets trl_ds's arguments and trains at the launch's ZeRO stage; what transformers would refuse on every rank,
and another --deepspeed, are refused before any rank starts; a failing rank is named by the log holding its output."""
import json

import pytest
from conftest import read_json, run_app

from trl_ds.check.script import parser_verdict
from trl_ds.rundir.layout import load_run_config

pytestmark = pytest.mark.integration

STEPS = 2
# argparse only (a word HfArgumentParser in a comment decides nothing), TrainingArguments built by hand from its own
# --ds file and SFTConfig's default logging_steps (10): it trains 2 steps, and logs no loss.
OWN_ENGINE_PY = '''"""Builds its own SFTConfig; no HfArgumentParser here."""
import argparse
import os

from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--ds")
ds = parser.parse_args().ds
run_dir = os.environ["TRL_DS_RUN_DIR"]
args = SFTConfig(output_dir=os.path.join(run_dir, "mine"), deepspeed=ds, max_steps=%d, per_device_train_batch_size=2,
                 use_cpu=True, bf16=False, report_to="none", save_strategy="no", learning_rate=1e-3)
data = load_dataset("json", data_files=os.path.join(run_dir, "data", "train.jsonl"), split="train")
SFTTrainer(model=os.path.join(run_dir, "model"), args=args, train_dataset=data).train()
''' % STEPS
OTHER_Z3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}

# LLaMA-Factory's layout: the parser lives in a module beside train.py
TRAIN_PY = '''import os
from datasets import load_dataset
from trl import SFTTrainer
from parsing import get_args

(args,) = get_args()
run_dir = os.environ["TRL_DS_RUN_DIR"]
data = load_dataset("json", data_files=os.path.join(run_dir, "data", "train.jsonl"), split="train")
SFTTrainer(model=os.path.join(run_dir, "model"), args=args, train_dataset=data).train()
'''
PARSING_PY = '''from transformers import HfArgumentParser
from trl import SFTConfig


def get_args():
    return HfArgumentParser((SFTConfig,)).parse_args_into_dataclasses()
'''


@pytest.fixture(scope="module")
def own_engine_run(tmp_path_factory):
    """The script trains ZeRO-3 from its own file while the run dir says zero=stage2 (the default)."""
    folder = tmp_path_factory.mktemp("own_engine")
    (folder / "train.py").write_text(OWN_ENGINE_PY)
    other = folder / "other_z3.json"
    other.write_text(json.dumps(OTHER_Z3))
    run_dir = folder / "run"
    out = run_app([f"script={folder / 'train.py'}", f"script_args=[--ds,{other}]"], run_dir)
    return run_dir, out, str(other)


def test_an_engine_of_another_zero_stage_is_named_with_both_stages(own_engine_run):
    run_dir, out, other = own_engine_run
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    line = f"trl_ds: WARNING: the engine ran ZeRO stage 3; the run dir says 2: the script's --deepspeed {other}"
    assert line in out.stderr.splitlines()
    summary = read_json(run_dir / "summary.json")
    stage = [d for d in summary["engine_differences"] if d["setting"] == "zero_stage"]
    assert [(d["engine"], d["run_dir"]) for d in stage] == [(3, 2)]
    for rank in (0, 1):
        memory = read_json(run_dir / f"memory/rank_{rank}.json")
        assert memory["deepspeed_config"]["zero_optimization"]["stage"] == 3  # what DeepSpeed itself was given
        assert [(d["engine"], d["run_dir"]) for d in memory["engine_differences"]
                if d["setting"] == "zero_stage"] == [(3, 2)]


def test_a_script_that_trained_but_logged_no_loss_completes(own_engine_run):
    run_dir, out, _ = own_engine_run
    assert out.returncode == 0
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["steps"], summary["final_loss"]) == ("completed", STEPS, None)
    assert (f"  final loss     no logged loss after {STEPS} steps (nothing was logged: the trainer's "
            f"logging_steps=10 is more than the steps trained)") in out.stdout  # SFTConfig's default


def test_a_script_without_a_parser_is_told_so_before_launch(own_engine_run):
    run_dir, out, _ = own_engine_run
    said = [line for line in out.stdout.splitlines() if "no HfArgumentParser or TrlParser" in line]
    assert len(said) == 1 and "it gets script_args only" in said[0]
    assert out.stdout.index(said[0]) < out.stdout.index("trl_ds: launching:")


def test_a_parser_in_a_helper_module_gets_trl_ds_arguments_and_trains_at_the_launchs_stage(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN_PY)
    (tmp_path / "parsing.py").write_text(PARSING_PY)
    run_dir = tmp_path / "run"
    out = run_app([f"script={tmp_path / 'train.py'}", "zero=stage3", f"trainer.max_steps={STEPS}"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"trl_ds: script={tmp_path / 'train.py'}: hf convention (found in parsing.py)" in out.stdout
    summary = read_json(run_dir / "summary.json")
    assert summary["steps"] == STEPS and summary["engine_differences"] == []
    for rank in (0, 1):
        memory = read_json(run_dir / f"memory/rank_{rank}.json")
        assert memory["deepspeed_config"]["zero_optimization"]["stage"] == 3
        assert memory["engine_differences"] == []
    assert "WARNING: the engine ran" not in out.stderr


@pytest.mark.light
def test_arguments_transformers_would_refuse_on_every_rank_are_refused_before_launch(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["script=trl.scripts.sft", "script_args=[--per_device_train_batch_size,8,--learning_rate,2e-5]"],
                  run_dir)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "trl_ds: 2 problems in the config:",
        "  - script=trl.scripts.sft: script_args' --per_device_train_batch_size 8 gives "
        "per_device_train_batch_size=8 where the run dir's DeepSpeed config has train_micro_batch_size_per_gpu=2; "
        "transformers refuses that mismatch on every rank. Set it through trl_ds's key "
        "(trainer.per_device_train_batch_size) and drop it from the script's arguments.",
        "  - script=trl.scripts.sft: script_args' --learning_rate 2e-05 gives learning_rate=2e-05 where the run "
        "dir's DeepSpeed config has optimizer.params.lr=0.001; transformers refuses that mismatch on every rank. "
        "Set it through trl_ds's key (trainer.learning_rate) and drop it from the script's arguments."]
    assert not (run_dir / "logs").exists()  # no rank ever started


@pytest.mark.light
def test_another_deepspeed_file_and_file_parsers_are_judged_before_launch(tmp_path, monkeypatch):
    """--deepspeed on the command line (TRL's sft.py) and `deepspeed:` in a file the script parses itself
    (parse_yaml_file: trl_ds's arguments go under its own values) are refused; parse_json_file is accepted."""
    other = tmp_path / "other_z3.json"
    other.write_text(json.dumps(OTHER_Z3))
    run_dir = tmp_path / "run"
    out = run_app(["script=trl.scripts.sft", f"script_args=[--deepspeed,{other}]"], run_dir)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"trl_ds: script=trl.scripts.sft: script_args' --deepspeed {other} gives deepspeed={other}, another "
        f"DeepSpeed config than the run dir's (ds_config.json): the engine would not be what trl_ds planned and "
        f"records. Drop it and set ZeRO, offload and the rest through trl_ds's keys (zero=, offload=, ...), or bring "
        f"that file as deepspeed.from_file={other}."]
    assert not (run_dir / "logs").exists()

    monkeypatch.setenv("TRL_DS_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "train.py"
    script.write_text("import sys\nfrom transformers import HfArgumentParser, TrainingArguments\n"
                      "p = HfArgumentParser(TrainingArguments)\n"
                      "(args,) = p.parse_yaml_file(sys.argv[1]) if sys.argv[1].endswith('.yaml') "
                      "else p.parse_json_file(sys.argv[1])\n")
    (tmp_path / "args.yaml").write_text(f"output_dir: out\ndeepspeed: {other}\n")
    (tmp_path / "args.json").write_text('{"output_dir": "out"}')
    for name, refused in (("args.yaml", True), ("args.json", False)):
        dry = tmp_path / f"dry_{name}"
        out = run_app([f"script={script}", f"script_args=[{tmp_path / name}]", "dry_run=true"], dry)
        assert out.returncode == 0, out.stderr
        found = parser_verdict(load_run_config(str(dry)), str(dry))
        assert found == ([f"script={script}: the script's own arguments give deepspeed={other}, another DeepSpeed "
                          f"config than the run dir's (ds_config.json): the engine would not be what trl_ds planned "
                          f"and records. Drop it and set ZeRO, offload and the rest through trl_ds's keys (zero=, "
                          f"offload=, ...), or bring that file as deepspeed.from_file={other}."] if refused else [])


def test_a_folder_script_failing_quietly_is_named_by_its_stdout_log(tmp_path):
    """script= a folder with __main__.py (as `python job` runs it); rank 1 prints its reason and exits 3."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "__main__.py").write_text(
        "import os, sys\nif os.environ['RANK'] == '1':\n    print('no data for this rank')\n    sys.exit(3)\n")
    run_dir = tmp_path / "run"
    out = run_app([f"script={tmp_path / 'job'}"], run_dir)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "failed" and summary["log"].endswith("/attempt_0/1/stdout.log"), summary
    assert open(summary["log"]).read().strip().splitlines()[-1] == "no data for this rank"
    assert f"first failing rank's log: {summary['log']}" in out.stdout
