"""One resolve for every command (check/resolve.py): `trl-ds plan X` plans, and its run: line launches, what
`python -m trl_ds X` launches. Over every importer (a DeepSpeed JSON, an accelerate YAML, a TRL recipe) × auto-fit
off/on, the plan's current row agrees with the dry run of X's ds_config.json, and the recommended row with the dry run
of its run: line (stage, offload, ratio, micro-batch, accumulation, world). The expected values are DeepSpeed's own
reading of the written ds_config.json (the keys it reads), not the planner's."""
import json
import shlex

import pytest
from conftest import REPO

from trl_ds.check.resolve import resolve
from trl_ds.cli.app import build
from trl_ds.cli.plan import main as plan_main
from trl_ds.cli.plan import plan
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError
from trl_ds.plan.optimizer_places import partial_ratio
from trl_ds.plan.planner import by_time, recommend, run_command
from trl_ds.plan.steptime import accumulation_for

IMPORTED = REPO / "tests" / "data" / "imported"
ACCELERATE_PARAM_ONLY = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  offload_optimizer_device: none
  offload_param_device: cpu
  zero3_init_flag: true
  zero_stage: 3
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: false
"""
RECIPE = "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\nlearning_rate: 1.0e-4\n"


def importers(tmp_path):
    accelerate = tmp_path / "param_only.yaml"
    accelerate.write_text(ACCELERATE_PARAM_ONLY)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    return {"none": [], "deepspeed": [f"deepspeed.from_file={IMPORTED / 'llamafactory_ds_z3_offload_config.json'}"],
            "deepspeed-zero2": [f"deepspeed.from_file={IMPORTED / 'llamafactory_ds_z2_config.json'}"],
            "accelerate": [f"launcher.from_accelerate={accelerate}"],
            "recipe": [f"trainer.from_trl_config={recipe}"],
            # TRL's ModelConfig quantization fields (mapped onto peft.*): a 4-bit base, on one GPU (bitsandbytes)
            "modelconfig": ["+trainer.args.load_in_4bit=true", "peft=lora", "cluster=1x1"]}


def written(overrides, run_dir):
    """What the dry run of `overrides` writes: (stage, optimizer device, param device, ratio, micro, accumulation,
    world), read from ds_config.json as DeepSpeed reads it."""
    cfg = compose(overrides)
    ds = build(cfg, str(run_dir), launching=False, command_line=list(overrides)).ds_config
    zero = ds.get("zero_optimization", {})
    opt, param = zero.get("offload_optimizer", {}), zero.get("offload_param", {})
    micro, acc = ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]
    return (zero.get("stage", 0), opt.get("device", "none"), param.get("device", "none"), opt.get("ratio", 1.0),
            micro, acc, ds["train_batch_size"] // (micro * acc))


def planned(setup, cfg):
    acc = accumulation_for(setup, cfg.batch.global_size, cfg.trainer.gradient_accumulation_steps)
    return (setup.stage, setup.optimizer_offload, setup.param_offload, partial_ratio(setup), setup.micro_batch, acc,
            setup.nodes * setup.gpus_per_node // (setup.tp_size * setup.sp_size))


@pytest.mark.slow  # every importer × auto-fit through the planner and two dry runs (about 12 s): make test only
@pytest.mark.parametrize("fit", [(), ("zero=auto", "offload=auto")], ids=["typed", "autofit"])
@pytest.mark.parametrize("importer", ["none", "deepspeed", "deepspeed-zero2", "accelerate", "recipe", "modelconfig"])
def test_plan_current_row_and_run_line_are_what_the_dry_run_writes(tmp_path, importer, fit):
    overrides = [*importers(tmp_path)[importer], *fit, "trainer.max_length=64"]
    cfg, rows, current, times = plan(overrides)
    assert planned(current.setup, cfg) == written(overrides, tmp_path / "current")
    best = recommend(by_time(rows, times), times)
    line = shlex.split(run_command(best.setup, overrides))[3:]
    assert planned(best.setup, cfg) == written(line, tmp_path / "recommended")


def test_a_zero3_file_is_planned_as_zero3(tmp_path):
    """Why 1: the plan composed without the importers and planned ZeRO-2, then refused deepspeed.from_file."""
    path = IMPORTED / "llamafactory_ds_z3_offload_config.json"
    cfg, _, current, _ = plan([f"deepspeed.from_file={path}"])
    assert (current.setup.stage, current.setup.optimizer_offload, current.setup.param_offload) == (3, "cpu", "cpu")


def test_advice_under_a_file_names_keys_that_win_over_it(tmp_path, capsys):
    """Why 1: with a ZeRO-2 file, `zero=stage3` loses to the file (a group choice names no key): the run: line names
    zero.stage=..., which the launch applies over the file."""
    path = IMPORTED / "llamafactory_ds_z2_config.json"
    assert plan_main([f"deepspeed.from_file={path}", "zero=stage3"]) == 0
    out = capsys.readouterr().out
    run = next(line for line in out.splitlines() if line.strip().startswith("run:"))
    assert "zero.stage=" in run and "zero=stage" not in run and f"deepspeed.from_file={path}" in run


def test_zero3_with_parameters_offloaded_alone_composes_and_plans(tmp_path):
    """Why 2: KeyError 'none/cpu' in the planner's run command, for a layout DeepSpeed accepts."""
    overrides = ["zero=stage3", "offload.param=cpu"]
    assert written(overrides, tmp_path)[:3] == (3, "none", "cpu")
    cfg, rows, current, times = plan(overrides)
    assert (current.setup.optimizer_offload, current.setup.param_offload) == ("none", "cpu")


def test_resolve_makes_a_relative_model_path_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_model").mkdir()
    run = resolve(["model.name_or_path=my_model"], fit="off")
    assert run.cfg.model.name_or_path == str(tmp_path / "my_model")
    assert run.topology.world == 2


def test_a_file_problem_is_returned_not_raised(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"optimizer": {"type": "SGD"}}))
    run = resolve([f"deepspeed.from_file={bad}", "zero=auto"])
    assert "optimizer.type: SGD" in run.problems[0]
    with pytest.raises(ConfigError, match="optimizer.type: SGD"):
        plan([f"deepspeed.from_file={bad}"])


def test_doctor_reads_the_files_the_run_reads(tmp_path, capsys):
    """doctor composed without the importers: an accelerate YAML whose process count the cluster cannot start was
    "ready" there and refused by the run."""
    from trl_ds.cli.doctor import main as doctor

    path = tmp_path / "acc.yaml"
    path.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: 'no'\n")
    assert doctor([f"launcher.from_accelerate={path}"]) == 2
    assert "num_processes: 8 is not this cluster's world 2" in capsys.readouterr().err


def test_trls_zero3_yaml_is_planned_as_the_run_launches_it(capsys):
    """Why 1's first case: `trl-ds plan model=llama3-8b cluster=1x8 launcher.from_accelerate=<trl>/zero3.yaml` planned
    "current: zero=stage2", while the run launches ZeRO-3 (trl's file: zero_stage 3, bf16, 8 processes)."""
    path = IMPORTED / "trl_accelerate_zero3.yaml"
    overrides = ["model=llama3-8b", "cluster=1x8", f"launcher.from_accelerate={path}"]
    cfg, rows, current, times = plan(overrides)
    assert (current.setup.stage, current.setup.dtype) == (3, "bf16")
    assert plan_main(overrides) == 0
    out = capsys.readouterr().out
    assert "current:     zero=stage3" in out
    run = next(line for line in out.splitlines() if line.strip().startswith("run:"))
    assert f"launcher.from_accelerate={path}" in run and "zero=stage" not in run


def test_a_refusals_smallest_change_under_a_file_wins_over_it(tmp_path):
    """Why 1's loop: with a ZeRO-2 file the smallest change that fits was `zero=stage3 offload=cpu ...`; applied, the
    file won, the run was ZeRO-2 again and the advice repeated. Under a file it names keys, and applied it fits."""
    path = IMPORTED / "llamafactory_ds_z2_config.json"
    overrides = [f"deepspeed.from_file={path}", "model=llama3-8b", "cluster=1x8", "cluster.gpu_memory_gb=24",
                 "trainer.max_length=2048", "dry_run=true"]
    warning = build(compose(overrides), str(tmp_path / "a"), launching=False, command_line=overrides).memory_warning
    change = warning.split("The smallest change that fits: ")[1].split(" (estimated")[0].split()
    assert change and all(not o.startswith(("zero=", "offload=")) for o in change), change
    again = build(compose(overrides + change), str(tmp_path / "b"), launching=False, command_line=overrides + change)
    assert again.memory_warning is None, again.memory_warning


@pytest.mark.parametrize("flags", [[], ["--need", "--gpus", "h100-80gb", "--counts", "8", "batch.global_size=64"]],
                         ids=["table", "need"])
@pytest.mark.parametrize("given", [f"deepspeed.from_file={IMPORTED / 'axolotl_zero3.json'}",
                                   f"launcher.from_accelerate={IMPORTED / 'trl_accelerate_zero3.yaml'}",
                                   "trainer.from_trl_config=recipe"], ids=["deepspeed", "accelerate", "recipe"])
def test_plan_prints_the_files_mapping_lines_as_the_dry_run(tmp_path, capsys, given, flags):
    """#59: the plan read the user's files without a word; the dry run prints each key and where it went. The plan
    prints the same lines, before its table; with --json on stderr, so stdout stays one JSON document."""
    (tmp_path / "recipe").write_text(RECIPE)
    overrides = [given.replace("=recipe", f"={tmp_path / 'recipe'}"), "model=llama3-8b", "cluster=1x8"]
    dry = build(compose(overrides), str(tmp_path / "dry"), launching=False, command_line=overrides).recipe_text
    assert dry and dry.startswith("trl_ds: ") and " -> " in dry  # the case this test is about: a file was mapped
    assert plan_main([*flags, *overrides]) == 0
    out = capsys.readouterr().out
    assert out.startswith(dry + "\n") and not out[len(dry) + 1:].startswith(" ")  # the lines, whole, then the table
    assert plan_main([*flags, *overrides, "--json"]) == 0
    printed = capsys.readouterr()
    assert printed.err == dry + "\n"
    json.loads(printed.out)
