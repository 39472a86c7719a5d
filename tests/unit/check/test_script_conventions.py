"""script=: the convention is found from what the code calls (a helper module too, PYTHONPATH too; a word in a comment
decides nothing) or stated (script_convention=); a folder with __main__.py is a script as `python` takes it; what a
rank's engine ran against the run dir (worker/engine_check.py); the outcome of a run that logged no loss."""
import os

import pytest

from trl_ds.check.script import check_script
from trl_ds.config.script_target import (
    HF_FILE_PARSER,
    HF_PARSER,
    NO_PARSER,
    TRL_PARSER,
    convention,
    find_convention,
    source_file,
)
from trl_ds.launch.summary import loss_text, script_output_log
from trl_ds.worker.engine_check import cause_of, differences, run_dir_settings

TRAIN_CALLING_A_HELPER = "from parsing import get_args\n\nargs = get_args()\n"
PARSING = ('from transformers import HfArgumentParser\nfrom trl import SFTConfig\n\n\ndef get_args():\n'
           '    return HfArgumentParser((SFTConfig,)).parse_args_into_dataclasses()\n')


def test_a_parser_in_a_helper_module_beside_the_script_is_found(tmp_path):
    """LLaMA-Factory's layout: train.py calls get_args() of parsing.py, which builds the HfArgumentParser."""
    (tmp_path / "train.py").write_text(TRAIN_CALLING_A_HELPER)
    (tmp_path / "parsing.py").write_text(PARSING)
    found = find_convention(str(tmp_path / "train.py"))
    assert (found.kind, found.where) == (HF_PARSER, str(tmp_path / "parsing.py"))
    # a package beside it, imported relatively from inside it, is followed too
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "args.py").write_text(PARSING.replace("HfArgumentParser", "TrlParser").replace(
        "from transformers import", "from trl import"))
    (tmp_path / "pkg" / "cli.py").write_text("from .args import get_args\n")
    (tmp_path / "train2.py").write_text("from pkg.cli import get_args\nget_args()\n")
    assert find_convention(str(tmp_path / "train2.py")).kind == TRL_PARSER


def test_a_parser_module_on_pythonpath_is_found(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "parsing.py").write_text(PARSING)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN_CALLING_A_HELPER)
    assert find_convention(str(tmp_path / "src" / "train.py")).kind == NO_PARSER
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    assert find_convention(str(tmp_path / "src" / "train.py")).kind == HF_PARSER


def test_a_word_in_a_comment_or_string_decides_nothing(tmp_path):
    (tmp_path / "train.py").write_text('"""Unlike HfArgumentParser scripts, this one uses argparse."""\n'
                                       "import argparse\n# TrlParser would read --config; we do not\n"
                                       "argparse.ArgumentParser().parse_args()\n")
    assert find_convention(str(tmp_path / "train.py")).kind == NO_PARSER


def test_a_script_parsing_only_its_own_file_is_hf_file(tmp_path):
    for entry in ("parse_yaml_file(sys.argv[1])", "parse_json_file(sys.argv[1])", "parse_dict({})"):
        (tmp_path / "train.py").write_text(f"import sys\nfrom transformers import HfArgumentParser, TrainingArguments\n"
                                           f"HfArgumentParser(TrainingArguments).{entry}\n")
        assert find_convention(str(tmp_path / "train.py")).kind == HF_FILE_PARSER, entry
    # HF's example scripts: a .json argument or flags: flags are what trl_ds gives
    (tmp_path / "train.py").write_text("import sys\nfrom transformers import HfArgumentParser\n"
                                       "p = HfArgumentParser(())\n"
                                       "if sys.argv[1].endswith('.json'):\n    p.parse_json_file(sys.argv[1])\n"
                                       "else:\n    p.parse_args_into_dataclasses()\n")
    assert find_convention(str(tmp_path / "train.py")).kind == HF_PARSER


def test_the_convention_can_be_stated(compose_cfg, tmp_path):
    (tmp_path / "train.py").write_text("import argparse\n")
    cfg = compose_cfg([f"script={tmp_path / 'train.py'}", "script_convention=hf"])
    assert (convention(cfg).kind, convention(cfg).stated) == (HF_PARSER, True)
    cfg = compose_cfg([f"script={tmp_path / 'train.py'}"])
    assert (convention(cfg).kind, convention(cfg).stated) == (NO_PARSER, False)
    assert check_script(compose_cfg([f"script={tmp_path / 'train.py'}", "script_convention=argparse"])) == [
        "script_convention=argparse: not a convention. Choose one of auto, trl, hf, hf_file, none "
        "(docs/scripts.md, 'What the script receives')."]


def test_a_folder_or_package_with_main_is_a_script(compose_cfg, tmp_path, monkeypatch):
    """As `python some_folder` and `python -m package` run them."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "__main__.py").write_text("print('hi')\n")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    assert check_script(compose_cfg([f"script={tmp_path / 'job'}"])) == []
    assert source_file(str(tmp_path / "job")) == str(tmp_path / "job" / "__main__.py")
    assert check_script(compose_cfg(["script=./job"])) == []
    assert check_script(compose_cfg(["script=./empty"])) == [
        "script=./empty: a folder without __main__.py, which `python ./empty` would run. Add one, or give the "
        "training script in it (script=./empty/train.py)."]
    (tmp_path / "job" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_script(compose_cfg(["script=job"])) == []  # a package by its name, as `python -m job`
    assert source_file("job") == str(tmp_path / "job" / "__main__.py")


ZERO3_FILE = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
RUN_DIR_DS = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"},
              "bf16": {"enabled": False}, "fp16": {"enabled": False}}


def test_the_engine_and_the_run_dir_are_compared_setting_by_setting():
    """What an engine built from a ZeRO-3 file with CPU optimizer offload and a torch optimizer reports (the values
    DeepSpeed's getters return for that file), against the run dir's ZeRO-2 JSON."""
    ran = {"zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "none", "micro_batch": 2, "accumulation": 1,
           "gradient_clipping": 1.0, "precision": "fp32", "world_size": 2, "optimizer": "AdamW (built in code)"}
    said = run_dir_settings(RUN_DIR_DS, 2)
    found = differences(ran, said, "the script's --deepspeed other_z3.json")
    assert [(d["name"], d["engine"], d["run_dir"]) for d in found] == [
        ("ZeRO stage", 3, 2), ("optimizer offload", "cpu", "none"), ("optimizer", "AdamW (built in code)", "adamw")]
    assert all(d["cause"] == "the script's --deepspeed other_z3.json" for d in found)
    assert differences(run_dir_settings(RUN_DIR_DS, 2), said, None) == []
    assert run_dir_settings(ZERO3_FILE, 2)["micro_batch"] == "auto"  # "auto" is never compared
    # an absent key is DeepSpeed's default (gradient_clipping 0.0); an optimizer built in code where the file has none
    # is what the file says
    assert [d["name"] for d in differences({**ran, "micro_batch": 8}, run_dir_settings(ZERO3_FILE, 2), None)] == [
        "gradient clipping"]


def test_the_cause_names_the_scripts_own_deepspeed_config(tmp_path):
    run_dir = str(tmp_path / "run")
    assert cause_of(os.path.join(run_dir, "ds_config.json"), run_dir) is None
    assert cause_of("other_z3.json", run_dir) == "the script's --deepspeed other_z3.json"
    assert cause_of(None, run_dir).startswith("the script's TrainingArguments name no DeepSpeed config "
                                              "(deepspeed=None): accelerate built the engine from its defaults")


def test_a_run_that_logged_no_loss_says_so():
    assert loss_text({"final_loss": None, "mean_loss": 5.1, "steps": 2, "logging_steps": 500}) == (
        "no logged loss after 2 steps (nothing was logged: the trainer's logging_steps=500 is more than the steps "
        "trained)")
    assert loss_text({"final_loss": 5.25, "mean_loss": None, "steps": 3}) == "5.2500 after 3 steps"


def test_a_failed_rank_is_named_by_the_log_holding_its_last_output(tmp_path):
    (tmp_path / "stderr.log").write_text("")
    (tmp_path / "stdout.log").write_text("no data for this rank\n")
    assert script_output_log(str(tmp_path / "stderr.log")) == str(tmp_path / "stdout.log")
    (tmp_path / "stderr.log").write_text("Traceback ...\nValueError: x\n")
    assert script_output_log(str(tmp_path / "stderr.log")) == str(tmp_path / "stderr.log")
    assert script_output_log(None) is None


@pytest.mark.parametrize("name", ["trl.scripts.sft"])
def test_trl_scripts_are_trl_parser_scripts(name):
    assert find_convention(source_file(name)).kind == TRL_PARSER


def test_peft_a_script_cannot_receive_is_said_before_launch(compose_cfg, tmp_path):
    from trl_ds.check.script import convention_notes

    (tmp_path / "train.py").write_text(PARSING + "get_args()\n")
    cfg = compose_cfg([f"script={tmp_path / 'train.py'}", "peft=lora"])
    notes = convention_notes(cfg, convention(cfg))
    assert notes == [
        f"script={tmp_path / 'train.py'}: hf convention (found in train.py): it gets trainer.yaml's TrainingArguments "
        f"as flags, then script_args.",
        "peft=lora: a script of the hf convention receives no peft or quantization settings (TrainingArguments has "
        "none): it trains the model its own code builds, while the plan assumes lora. Build the adapters in the "
        "script, or drop peft=."]
    cfg = compose_cfg(["script=trl.scripts.sft", "peft=lora"])  # TRL's scripts take them (use_peft, lora_r, ...)
    assert len(convention_notes(cfg, convention(cfg))) == 1
