"""Argument values with a closed set of choices are checked against transformers' and TRL's own lists; the expected
lists below come from those libraries themselves (their enums imported, their trainers' source), not from trl_ds."""
import importlib.util
import os
import re

import pytest

from tests.conftest import run_app
from trl_ds.check.argument_values import check_argument_values, trainer_choices
from trl_ds.errors import ConfigError


def trl_source(path: str) -> str:
    with open(os.path.join(importlib.util.find_spec("trl").submodule_search_locations[0], path)) as f:
        return f.read()


def test_transformers_enums_are_read_as_transformers_defines_them():
    from transformers.trainer_utils import IntervalStrategy, SaveStrategy, SchedulerType

    choices = trainer_choices("sft")
    assert choices["lr_scheduler_type"][0] == tuple(m.value for m in SchedulerType)
    assert choices["save_strategy"][0] == tuple(m.value for m in SaveStrategy)
    assert choices["logging_strategy"][0] == tuple(m.value for m in IntervalStrategy)
    assert {"adamw_torch", "adamw_torch_fused", "sgd", "adafactor"} <= set(choices["optim"][0])  # OptimizerNames


def test_loss_types_are_the_ones_each_trainer_branches_on():
    """DPO and GRPO list their loss types in the field's help only; the trainers' own branches must agree."""
    dpo = set(trainer_choices("dpo")["loss_type"][0])
    assert dpo == set(re.findall(r'loss_type == "(\w+)"', trl_source("trainer/dpo_trainer.py")))
    grpo_source = trl_source("trainer/grpo_trainer.py")
    used = set(re.findall(r'loss_type == "(\w+)"', grpo_source))
    used |= {name for group in re.findall(r"loss_type in \[([^\]]+)\]", grpo_source)
             for name in re.findall(r'"(\w+)"', group)}
    assert set(trainer_choices("grpo")["loss_type"][0]) == used
    assert trainer_choices("sft")["loss_type"][0] == ("nll", "dft", "chunked_nll")  # SFTConfig's "choices"
    assert "multi_objective_aggregation" not in trainer_choices("grpo")  # its help mixes values with prose: open


def test_every_default_of_the_trainer_group_is_a_valid_choice(compose_cfg):
    for trainer in ("sft", "dpo", "reward", "grpo"):
        cfg = compose_cfg([f"trainer={trainer}"])
        for key in ("lr_scheduler_type",):
            assert cfg.trainer[key] in trainer_choices(trainer)[key][0]
        assert check_argument_values(cfg) == []


def test_an_unknown_scheduler_names_transformers_values(compose_cfg):
    from transformers.trainer_utils import SchedulerType

    problems = check_argument_values(compose_cfg(["trainer.lr_scheduler_type=cosine_warmup"]))
    valid = ", ".join(m.value for m in SchedulerType)
    assert problems == [f"trainer.lr_scheduler_type=cosine_warmup: cosine_warmup is not a choice; transformers' "
                        f"SchedulerType has {valid}. Did you mean trainer.lr_scheduler_type=cosine_warmup_with_min_lr?"]


def test_passthrough_values_lists_included(compose_cfg):
    cfg = compose_cfg(["trainer=dpo", "+trainer.args.loss_type=[sigmoid,ipoo]",
                       "+trainer.args.truncation_mode=keep_middle", "+trainer.args.logging_strategy=epoch"])
    problems = check_argument_values(cfg)
    assert len(problems) == 2
    assert problems[0].startswith("trainer.args.loss_type=[sigmoid,ipoo]: ipoo is not a choice; TRL's "
                                  "DPOConfig.loss_type takes sigmoid, hinge, ipo,")
    assert problems[0].endswith("Did you mean trainer.args.loss_type=ipo?")
    assert problems[1] == ("trainer.args.truncation_mode=keep_middle: keep_middle is not a choice; TRL's "
                           "DPOConfig.truncation_mode takes keep_end, keep_start. Did you mean "
                           "trainer.args.truncation_mode=keep_end?")


def test_a_bad_value_fails_the_dry_run_with_exit_2(tmp_path):
    done = run_app(["trainer.lr_scheduler_type=cosine_warmup", "dry_run=true"], tmp_path / "run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cosine_warmup is not a choice; transformers' SchedulerType has linear, cosine," in done.stderr


def test_validate_reports_it_with_the_other_problems(compose_cfg, tmp_path):
    from trl_ds.check.validate import validate

    with pytest.raises(ConfigError, match="trainer.lr_scheduler_type=linearr: linearr is not a choice"):
        validate(compose_cfg(["trainer.lr_scheduler_type=linearr"]), str(tmp_path), launching=False)
