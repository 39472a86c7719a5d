"""The planner never recommends what the launch refuses. Over the cross product the planner and the launch share
(ZeRO stage × offload × offload.ratio × tp × trainer × peft, the tiny model on 2 CPU ranks) the plan refuses exactly
the configs the launch's check refuses, with the same lines, and for each config it plans, its run: line, read as the
launch reads it (the presets' YAML files, the overrides' values), passes the launch's check. The expected verdicts
are check/validate.py's at dry-run level; in-process, on 16 composed configs."""
import copy
import itertools

import pytest
import yaml
from conftest import REPO
from omegaconf import OmegaConf

from trl_ds.check.plan_rows import config_problems
from trl_ds.check.validate import validate
from trl_ds.cli.plan import main as plan_main
from trl_ds.cli.plan import plan_config
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError
from trl_ds.plan.memory import setup_from_config
from trl_ds.plan.planner import recommend, run_command

# 576 configs through the planner and the launch's checks: make test only (not make test-fast)
pytestmark = pytest.mark.slow

RUN = "/nonexistent/trl_ds-plan-agrees"  # no run dir: the dry run's check of a new one
STAGES = ("zero=stage0", "zero=stage1", "zero=stage2", "zero=stage3")
OFFLOADS = ("offload=none", "offload=cpu", "offload=nvme")
# the schema's defaults spelled out, so one composed config serves every point; 43,476: ten sub-groups per rank
RATIOS = (("offload.ratio=1.0", "zero.sub_group_size=1000000000"),
          ("offload.ratio=0.5", "zero.sub_group_size=1000000000"),
          ("offload.ratio=0.5", "zero.sub_group_size=43476"))
TPS = ((), ("tp=autotp", "tp.size=2"))
TRAINERS = ("trainer=sft", "trainer=dpo", "trainer=grpo", "trainer=reward")
PEFTS = ((), ("peft=lora",))


def apply(cfg, overrides):
    """Overrides as the launch composes them: a group's option is its preset file's keys, a dotted key its value."""
    for override in overrides:
        key, value = override.split("=", 1)
        if "." in key:
            OmegaConf.update(cfg, key, yaml.safe_load(value), merge=False)
            continue
        preset = yaml.safe_load((REPO / "conf" / key / f"{value}.yaml").read_text())
        for name, given in preset.items():
            OmegaConf.update(cfg, f"{key}.{name}", given, merge=False)


def launch_problems(cfg):
    try:
        validate(cfg, RUN, launching=False)
    except ConfigError as err:
        return err.problems
    return []


@pytest.fixture(scope="module")
def bases():
    """One composed config per trainer × peft × tp (the groups whose presets the points do not rewrite)."""
    return {(trainer, peft, tp): compose([trainer, *peft, *tp]) for trainer in TRAINERS for peft in PEFTS for tp in TPS}


def test_the_plan_refuses_and_recommends_as_the_launch_checks(bases):
    planned, refused = {}, 0
    pristine = copy.deepcopy(bases)  # the points rewrite their base in place; a run: line starts from the composed one
    for trainer, peft, tp, ratio, stage, offload in itertools.product(TRAINERS, PEFTS, TPS, RATIOS, STAGES, OFFLOADS):
        cfg, point = bases[trainer, peft, tp], [trainer, *peft, *tp, stage, offload, *ratio]
        apply(cfg, [stage, offload, *ratio])
        expected = launch_problems(cfg)
        refused += bool(expected)
        if expected:  # the plan refuses with the launch's lines (trl-ds plan prints them and exits 2)
            with pytest.raises(ConfigError) as err:
                plan_config(cfg, setup_from_config(cfg))
            assert err.value.problems == expected, point
            continue
        # the grid varies stage and offload around the point: one plan per trainer × peft × tp × ratio
        group = (trainer, peft, tp, ratio)
        if group in planned:
            assert config_problems(cfg) == [], point  # what plan_config checks before it plans
        else:
            rows, _, times = plan_config(cfg, setup_from_config(cfg))
            best = recommend(rows, times)
            planned[group] = best and run_command(best.setup, point).split()[3:]
            if best:
                run = copy.deepcopy(pristine[trainer, peft, tp])
                apply(run, [o for o in planned[group] if not o.startswith(("trainer=", "peft=", "tp="))])
                assert launch_problems(run) == [], (point, planned[group])
    # planned: every trainer, alone and with LoRA, at offload.ratio=1; the ratio with ten sub-groups per rank without
    # LoRA (LoRA's few trainable parameters make those sub-groups too coarse); tp=autotp with sft alone only
    whole, ten = RATIOS[0], RATIOS[2]
    expected = {(trainer, peft, (), whole) for trainer in TRAINERS for peft in PEFTS}
    expected |= {(trainer, (), (), ten) for trainer in TRAINERS} | {("trainer=sft", (), TPS[1], whole)}
    assert set(planned) == expected and all(planned.values()), planned
    assert 0 < refused < 576, refused


def test_the_issues_two_plans_are_refused_with_the_launchs_line(capsys):
    """`trl-ds plan tp=autotp tp.size=2 trainer=dpo ...` printed a run: line the launch refuses; `... offload.ratio=0.5`
    planned "opt-cpu@0.5 ... fits" where DeepSpeed's split (stage3.py: sub-group i is offloaded when
    i >= int((1 - ratio) * n)) of a rank's 1,003,782,656 elements in sub-groups of 1e9 keeps the first (n = 2,
    int(0.5 * 2) = 1) on the device and offloads 0.4 %; a DPO beta of 0 trains nothing."""
    llama = ["model=llama3-8b", "cluster=1x8"]
    for overrides in (["tp=autotp", "tp.size=2", "trainer=dpo", *llama],
                      ["zero=stage3", "offload=cpu", "offload.ratio=0.5", *llama],
                      ["trainer=dpo", "trainer.beta=0"]):
        assert plan_main(overrides) == 2
        expected = launch_problems(compose(overrides))
        assert expected and capsys.readouterr().err == f"trl-ds plan: {ConfigError(expected).render()}\n"
