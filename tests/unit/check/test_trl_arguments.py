"""trainer.args: TRL's own arguments by name, checked before launch against the classes `trl <cmd>` parses."""
import dataclasses
import importlib
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, read_json, run_app

from tests.unit.check.test_trainer_rules import problems
from tests.unit.rundir.test_trainer_yaml import parse_like_trl_cli
from trl_ds.check.trl_arguments import PARSER_CLASSES, trainer_fields, type_problem


@pytest.mark.parametrize("trainer", list(PARSER_CLASSES))
def test_fields_read_from_source_are_the_parsers_fields(trainer):
    """The ast reading of the installed sources gives exactly the init fields of the classes TRL's parser holds."""
    parser = importlib.import_module(f"trl.scripts.{trainer}").make_parser()
    real = {f.name for cls in parser.dataclass_types[:3] for f in dataclasses.fields(cls) if f.init}
    assert set(trainer_fields(trainer)) == real


def test_the_check_imports_no_torch():
    code = ("import sys; from trl_ds.check.trl_arguments import check_arguments; "
            "print(check_arguments('sft', {'packin': True}, set()), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False") and "Closest: packing" in out.stdout


@pytest.mark.parametrize("value,annotation,wanted", [
    (True, "bool", None), ("yes", "bool", "bool"), (5, "float | None", None), (True, "float | None", "float or None"),
    (3, "int", None), (3.5, "int", "int"), ("x", "int | str | None", None), (["a"], "None | str | list[str]", None),
    ({"a": 1}, "dict[str, Any] | str | None", None), (1, "IntervalStrategy | str", None),
    ("bfd", "Literal['bfd', 'wrapped']", None), ("x", "Literal['bfd', 'wrapped']", "'bfd' or 'wrapped'"),
])
def test_type_problem(value, annotation, wanted):
    assert type_problem(value, annotation) == wanted


def test_every_problem_at_once_with_the_fix(compose_cfg):
    found = problems(compose_cfg, ["+trainer.args.packin=true", "+trainer.args.neftune_noise_alpha=loud",
                                   "+trainer.args.seed=3", "+trainer.args.learning_rate=0.1",
                                   "+trainer.args.bf16=true", "+trainer.args.save_total_limit=3",
                                   "+trainer.args.beta=0.2"])
    assert found == [
        "trainer.args.packin=true: trainer=sft has no argument packin (checked against "
        "ScriptArguments/SFTConfig/ModelConfig). Closest: packing, eval_packing.",
        "trainer.args.neftune_noise_alpha=loud must be float or None (TrainingArguments.neftune_noise_alpha: "
        "float | None).",
        "trainer.args.seed=3: trl_ds sets seed itself. Use seed=3 instead.",
        "trainer.args.learning_rate=0.1: trl_ds sets learning_rate from trainer.learning_rate. Use "
        "trainer.learning_rate=0.1 instead.",
        "trainer.args.bf16=true: trl_ds sets bf16 itself. Use precision=bf16 instead.",
        "trainer.args.save_total_limit=3: trl_ds sets save_total_limit itself. Use checkpoint.keep_last=3 (trl_ds "
        "rotates only complete checkpoints) instead.",
        "trainer.args.beta=0.2: trl_ds sets beta from trainer.beta. Use trainer.beta=0.2 instead.",
    ]


def test_an_argument_of_another_trainer_says_whose_it_is(compose_cfg):
    assert problems(compose_cfg, ["+trainer.args.loss_type=[sigmoid]", "trainer=reward"]) == [
        "trainer.args.loss_type=[sigmoid]: trainer=reward has no argument loss_type (checked against "
        "ScriptArguments/RewardConfig/ModelConfig). It is an argument of trainer=sft/dpo/grpo/kto. Closest: "
        "lora_task_type."]


def test_passthrough_reaches_trl_and_trainer_yaml_still_parses(tmp_path):
    """trainer.yaml holds the arguments by name, and TRL's own CLI parser turns them into its config objects."""
    run_dir = tmp_path / "run"
    out = run_app(["+trainer.args.neftune_noise_alpha=5", "+trainer.args.packing=true",
                   "+trainer.args.eval_on_start=true", "+trainer.args.model_revision=main",
                   "trainer.eval_strategy=steps", "trainer.eval_steps=3", "trainer.per_device_eval_batch_size=4",
                   "trainer.max_steps=-1", "trainer.num_train_epochs=2", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert (saved["neftune_noise_alpha"], saved["packing"], saved["model_revision"]) == (5, True, "main")
    (script, training, model, _), _ = parse_like_trl_cli("sft", run_dir / "trainer.yaml")
    assert (training.neftune_noise_alpha, training.packing, training.eval_on_start) == (5.0, True, True)
    assert (training.eval_strategy, training.eval_steps, training.per_device_eval_batch_size) == ("steps", 3, 4)
    assert (training.max_steps, training.num_train_epochs) == (-1, 2.0)
    assert (script.dataset_test_split, model.model_revision) == ("test", "main")
    # packing joins rows, so the steps of an epoch are the trainer's to count
    assert read_json(run_dir / "plan.json")["training"]["not_counted"].startswith("packing joins rows")


def test_a_passthrough_mistake_exits_2_before_launch(tmp_path):
    out = run_app(["+trainer.args.packin=true", "trainer.max_steps=2"], tmp_path / "run")
    assert out.returncode == 2 and "Closest: packing" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()
