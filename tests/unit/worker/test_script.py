"""script=: what is refused before launch (nothing of the script runs), what each rank runs, and what the script
receives, read back by the parsers the scripts themselves use (TRL's TrlParser, transformers' HfArgumentParser)."""
import json
import os

import pytest
import yaml
from conftest import run_app

from trl_ds.check.script import check_script
from trl_ds.config.script_target import HF_PARSER, NO_PARSER, TRL_PARSER, find_convention, source_file
from trl_ds.launch.deepspeed import build_deepspeed_commands
from trl_ds.launch.torchrun import build_node_commands
from trl_ds.worker.patches import with_configured_state
from trl_ds.worker.script_argv import SCRIPT_CONFIG, script_argv


def test_a_missing_file_is_refused(compose_cfg, tmp_path):
    path = tmp_path / "nope" / "train.py"
    assert check_script(compose_cfg([f"script={path}"])) == [
        f"script={path}: no such file. Give the path of your training script, e.g. script=train.py."]


def test_a_file_that_is_not_python_is_refused(compose_cfg, tmp_path):
    (tmp_path / "train.sh").write_text("echo hi\n")
    (tmp_path / "broken.py").write_text("def main(:\n    pass\n")
    assert check_script(compose_cfg([f"script={tmp_path}/train.sh"])) == [
        f"script={tmp_path}/train.sh: not a Python file (.py). Give your training script, e.g. script=train.py."]
    assert check_script(compose_cfg([f"script={tmp_path}/broken.py"])) == [
        f"script={tmp_path}/broken.py: not valid Python: invalid syntax at line 1. Fix the script."]


def test_a_module_that_does_not_import_is_refused_without_running_it(compose_cfg):
    assert check_script(compose_cfg(["script=trl.scripts.no_such_script"])) == [
        "script=trl.scripts.no_such_script: no importable Python module of that name here. Give a module that "
        "`python -m trl.scripts.no_such_script` runs (e.g. script=trl.scripts.sft), or a file path "
        "(script=./trl.scripts.no_such_script.py)."]
    assert check_script(compose_cfg(["script=no_such_package.train"]))[0].startswith(
        "script=no_such_package.train: no importable Python module")


def test_trl_scripts_must_match_the_trainer_group(compose_cfg):
    assert check_script(compose_cfg(["script=trl.scripts.dpo"])) == [
        "script=trl.scripts.dpo trains TRL's dpo trainer but trainer=sft: the plan, the checks and trainer.yaml "
        "follow the trainer group. Set trainer=dpo."]
    assert check_script(compose_cfg(["script=trl.scripts.dpo", "trainer=dpo"])) == []
    assert check_script(compose_cfg(["script=trl.scripts.sft"])) == []


def test_script_args_need_a_script(compose_cfg):
    assert check_script(compose_cfg(["script_args=[--lr,1]"])) == [
        "script_args=['--lr', '1'] is set without script=. Name the script (script=train.py or "
        "script=trl.scripts.sft), or drop script_args."]


def test_the_parser_convention_is_read_from_the_source(tmp_path):
    import trl.scripts.sft

    assert source_file("trl.scripts.sft") == trl.scripts.sft.__file__  # the installed file, found without running
    assert find_convention(trl.scripts.sft.__file__).kind == TRL_PARSER
    for source, kind in (("from transformers import HfArgumentParser\n", HF_PARSER), ("import argparse\n", NO_PARSER)):
        (tmp_path / "train.py").write_text(source)
        assert find_convention(str(tmp_path / "train.py")).kind == kind


def test_each_rank_runs_the_bootstrap_with_every_launcher(compose_cfg):
    for launcher in ("torchrun", "deepspeed"):
        for overrides, module in (([], "trl_ds.worker.train"), (["script=trl.scripts.sft"], "trl_ds.worker.script")):
            cfg = compose_cfg([f"launcher={launcher}", *overrides])
            build = build_deepspeed_commands if launcher == "deepspeed" else build_node_commands
            cmd = build(cfg, "/run")[0]
            assert cmd[-3:] == ["-m" if launcher == "torchrun" else "--module", module, "/run"]


@pytest.fixture(scope="module")
def script_run_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("script") / "run"
    out = run_app(["script=trl.scripts.sft", "zero=stage3", "batch.global_size=8", "trainer.learning_rate=2e-4",
                   "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    return str(run_dir)


def test_a_trl_parser_script_gets_the_run_dirs_trainer_yaml(script_run_dir):
    """Parsed by TRL's own sft.py parser from another folder: every path lands in the run dir."""
    from trl.scripts.sft import make_parser

    argv = script_argv(TRL_PARSER, script_run_dir, ["--logging_steps", "3"])
    assert argv == ["--config", os.path.join(script_run_dir, SCRIPT_CONFIG), "--logging_steps", "3"]
    script, training, model, _ = make_parser().parse_args_and_config(argv)  # fail_with_unknown_args=True
    ds_config = json.load(open(os.path.join(script_run_dir, "ds_config.json")))
    assert training.deepspeed == os.path.join(script_run_dir, "ds_config.json")
    assert training.output_dir == os.path.join(script_run_dir, "trainer")
    assert training.per_device_train_batch_size == ds_config["train_micro_batch_size_per_gpu"]
    assert training.per_device_train_batch_size * 2 * training.gradient_accumulation_steps == 8
    assert training.learning_rate == 2e-4 and training.logging_steps == 3  # script_args win
    assert model.model_name_or_path == os.path.join(script_run_dir, "model")
    assert script.dataset_name == os.path.join(script_run_dir, "data")
    trainer_yaml = yaml.safe_load(open(os.path.join(script_run_dir, "trainer.yaml")))
    assert trainer_yaml["deepspeed"] == "./ds_config.json"  # the file it names is the one the script gets


def test_an_hf_argument_parser_script_gets_training_arguments_as_flags(script_run_dir):
    from transformers import HfArgumentParser, TrainingArguments

    argv = script_argv(HF_PARSER, script_run_dir, ["--seed", "7"])
    (training,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv)
    trainer_yaml = yaml.safe_load(open(os.path.join(script_run_dir, "trainer.yaml")))
    assert training.deepspeed == os.path.join(script_run_dir, "ds_config.json")
    assert training.output_dir == os.path.join(script_run_dir, "trainer")
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_steps",
                "use_cpu", "bf16", "save_strategy"):
        assert getattr(training, key) == trainer_yaml[key], key
    assert training.lr_scheduler_type.value == trainer_yaml["lr_scheduler_type"]
    assert training.seed == 7
    assert "--model_name_or_path" not in argv  # not a TrainingArguments field: its parser would refuse it


def test_other_scripts_get_only_their_own_arguments(script_run_dir):
    assert script_argv(NO_PARSER, script_run_dir, ["--epochs", "2"]) == ["--epochs", "2"]


def test_a_script_file_travels_in_the_run_dir(tmp_path):
    """Every rank runs <run dir>/script/<its name> (worker/script.py): the file reaches each node the run dir reaches,
    and a job that starts later runs it as it was when launched (and checked)."""
    script = tmp_path / "mine" / "train.py"
    script.parent.mkdir()
    script.write_text("print('v1')\n")
    run_dir = tmp_path / "run"
    out = run_app([f"script={script}", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    script.write_text("print('v2')\n")  # edited after the launch
    assert (run_dir / "script" / "train.py").read_text() == "print('v1')\n"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["script"] == str(script)  # named as given


def test_every_form_of_accelerator_config_adopts_the_configured_state(tmp_path):
    from transformers.trainer_pt_utils import AcceleratorConfig

    (tmp_path / "acc.json").write_text('{"split_batches": false}')
    assert with_configured_state(None) == {"use_configured_state": True}
    assert with_configured_state({"even_batches": False}) == {"even_batches": False, "use_configured_state": True}
    assert with_configured_state(str(tmp_path / "acc.json")) == {"split_batches": False, "use_configured_state": True}
    assert with_configured_state(AcceleratorConfig()).use_configured_state is True
