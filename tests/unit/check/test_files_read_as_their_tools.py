"""Real files from public projects (tests/data/imported, sources in its README) read as their own tools read them
(#59's Why 2-5): DeepSpeed's own bounds and derivations, accelerate's DeepSpeedPlugin and its launch, TrlParser.
The expected values come from those tools' sources (cited at each test), not from trl_ds's code."""
import json
import shutil

import pytest
import yaml
from conftest import REPO

from trl_ds.check.resolve import resolve
from trl_ds.cli.app import build
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError

IMPORTED = REPO / "tests" / "data" / "imported"


def dry_run(tmp_path, *overrides):
    """(prepared, the printed import lines) of a dry run, as `python -m trl_ds OVERRIDES dry_run=true` builds it."""
    cfg = compose(list(overrides))
    prepared = build(cfg, str(tmp_path / "run"), launching=False, command_line=list(overrides))
    return prepared, prepared.recipe_text or ""


def refusal(tmp_path, *overrides):
    with pytest.raises(ConfigError) as err:
        dry_run(tmp_path, *overrides)
    return err.value.problems


@pytest.mark.parametrize("name", ["axolotl_zero3.json", "axolotl_zero3_bf16.json",
                                  "axolotl_zero3_bf16_cpuoffload_all.json",
                                  "axolotl_zero3_bf16_cpuoffload_params.json"])
def test_axolotls_zero3_zeros_are_what_deepspeed_accepts(tmp_path, name):
    """DeepSpeed 0.19.8 (runtime/zero/config.py): sub_group_size and max_live_parameters ge=0; a ZeRO-3 engine trains
    with both 0 (each parameter its own sub-group). trl_ds refused both as "must be positive"."""
    source = json.loads((IMPORTED / name).read_text())["zero_optimization"]
    prepared, _ = dry_run(tmp_path, f"deepspeed.from_file={IMPORTED / name}", "cluster=1x8")
    zero = prepared.ds_config["zero_optimization"]
    live = source.get("stage3_max_live_parameters", source.get("max_live_parameters"))  # axolotl writes either
    assert (zero["sub_group_size"], zero["stage3_max_live_parameters"]) == (source["sub_group_size"], live) == (0, 0)


def test_zero_sizes_are_refused_below_deepspeeds_own_bounds(tmp_path):
    problems = refusal(tmp_path, "zero=stage3", "zero.sub_group_size=-1", "zero.reduce_bucket_size=0")
    assert "zero.sub_group_size=-1 must be 0 or more." in problems
    assert "zero.reduce_bucket_size=0 must be positive." in problems  # DeepSpeed: gt=0


def test_accelerates_auto_gather_on_save_is_filled(tmp_path):
    """accelerate's zero_stage3_offload_config.json writes "auto" in stage3_gather_16bit_weights_on_model_save, which
    its DeepSpeedPlugin fills (utils/dataclasses.py, zero3_save_16bit_model); refused before."""
    path = IMPORTED / "accelerate_zero_stage3_offload_config.json"
    prepared, text = dry_run(tmp_path, f"deepspeed.from_file={path}", "cluster=1x8")
    zero = prepared.ds_config["zero_optimization"]
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True  # save_final_model=true needs the gathered model
    assert (zero["offload_optimizer"]["device"], zero["offload_param"]["device"]) == ("cpu", "cpu")
    assert "accelerate's DeepSpeedPlugin fills it from zero3_save_16bit_model" in text
    prepared, _ = dry_run(tmp_path, f"deepspeed.from_file={path}", "cluster=1x8", "save_final_model=false")
    assert prepared.ds_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False


def test_accelerate_config_output_with_empty_blocks_imports(tmp_path):
    """PEFT's accelerate_ds_zero3_cpu_offload_config.yaml (what `accelerate config` writes): empty fsdp_config and
    megatron_lm_config, which accelerate ignores under DEEPSPEED; refused before."""
    path = IMPORTED / "peft_accelerate_ds_zero3_cpu_offload_config.yaml"
    prepared, text = dry_run(tmp_path, f"launcher.from_accelerate={path}", "cluster.gpus_per_node=1")
    assert prepared.ds_config["zero_optimization"]["stage"] == 3
    assert "fsdp_config: {} not used: empty (accelerate reads it for FSDP only)" in text


def test_a_recipes_single_loss_type_and_fractions_parse_as_trlparser_parses_them(tmp_path):
    """alignment-handbook's smollm3 apo.yaml: loss_type: apo_zero (DPOConfig.loss_type is list[str]; TrlParser's
    nargs="+" makes it ['apo_zero']), save_steps: 0.5 (transformers: below 1, a fraction of the run); warmup_steps: 0.1
    is what trl_ds's own warmup_ratio message says to write (transformers 5: a fraction below 1)."""
    recipe = yaml.safe_load((IMPORTED / "alignment_handbook_smollm3_dpo_apo.yaml").read_text())
    assert (recipe["loss_type"], recipe["save_steps"]) == ("apo_zero", 0.5)
    mine = tmp_path / "apo.yaml"
    mine.write_text(yaml.safe_dump({k: recipe[k] for k in ("loss_type", "save_steps", "beta")} | {
        "warmup_steps": 0.1}))
    prepared, _ = dry_run(tmp_path, "trainer=dpo", f"trainer.from_trl_config={mine}")
    args = prepared.trainer_args
    assert (args["loss_type"], args["save_steps"], args["warmup_steps"]) == (["apo_zero"], 0.5, 0.1)
    whole = IMPORTED / "alignment_handbook_smollm3_dpo_apo.yaml"  # refused for what TRL 1.16 itself refuses
    problems = refusal(tmp_path, "trainer=dpo", f"trainer.from_trl_config={whole}", "cluster=1x8")
    assert not [p for p in problems if "loss_type" in p or "save_steps" in p or "every_steps" in p], problems
    assert refusal(tmp_path, "trainer.warmup_steps=1.5") == [
        "trainer.warmup_steps=1.5 must be a number of steps (0 or more) or a fraction of the run's steps below 1 "
        "(e.g. 0.1)."]


def test_zenflow_leaves_the_micro_batch_to_deepspeed(tmp_path):
    """DeepSpeedExamples' ZenFlow zf_config.json: train_batch_size and gradient_accumulation_steps, no micro-batch;
    DeepSpeed derives it as train_batch_size / (accumulation × world) (runtime/config.py
    _set_batch_related_parameters). trl_ds kept its own micro-batch 2 and refused the file."""
    path = IMPORTED / "deepspeedexamples_zenflow_zf_config.json"
    source = json.loads(path.read_text())
    prepared, text = dry_run(tmp_path, f"deepspeed.from_file={path}", "cluster=1x8")
    ds = prepared.ds_config
    assert ds["train_micro_batch_size_per_gpu"] == source["train_batch_size"] // (
        source["gradient_accumulation_steps"] * 8)
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (source["train_batch_size"], 1)
    assert "(derived by DeepSpeed) train_batch_size 32 / (gradient_accumulation_steps 1 × world 8)" in text


def test_keys_deepspeed_never_reads_are_a_line_in_a_file_and_refused_on_the_command_line(tmp_path):
    """LLaMA-Factory's files carry comms_config and monitor_config, which DeepSpeed 0.19.8's DeepSpeedConfig never
    looks up: in a file one printed line each; typed on the command line they stay refused (a typo there)."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "comms_config": {"verbose": False},
                                "monitor_config": {"enabled": True}}))
    prepared, text = dry_run(tmp_path, f"deepspeed.from_file={path}")
    assert "comms_config" not in prepared.ds_config and "monitor_config" not in prepared.ds_config
    assert "  comms_config: {'verbose': False}: DeepSpeed 0.19.8 never reads comms_config and ignores it; not " \
           "written" in text
    problems = refusal(tmp_path, "+deepspeed.comms_config.verbose=false")
    assert any("never reads comms_config" in p for p in problems), problems


def test_a_yaml_and_a_json_give_one_line_saying_which_wins(tmp_path):
    """An accelerate YAML (stage 3, CPU offload) with deepspeed.from_file (stage 0): the JSON holds the DeepSpeed
    settings, as accelerate's own deepspeed_config_file would; the run was stage-0 settings mixed with the YAML's
    offload, with no line."""
    yaml_path = tmp_path / "acc.yaml"
    yaml_path.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no",
                                         "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "cpu",
                                                              "offload_param_device": "cpu"}}))
    json_path = IMPORTED / "llamafactory_ds_z2_config.json"
    prepared, text = dry_run(tmp_path, f"launcher.from_accelerate={yaml_path}", f"deepspeed.from_file={json_path}")
    zero = prepared.ds_config["zero_optimization"]
    assert (zero["stage"], "offload_optimizer" in zero) == (2, False)
    assert (f"deepspeed_config: offload_optimizer_device, offload_param_device, zero_stage not used: "
            f"deepspeed.from_file={json_path} wins") in text


def test_a_group_choice_under_a_file_says_the_file_wins(tmp_path):
    path = IMPORTED / "llamafactory_ds_z3_config.json"
    prepared, text = dry_run(tmp_path, f"deepspeed.from_file={path}", "zero=stage2")
    assert prepared.ds_config["zero_optimization"]["stage"] == 3
    assert ("zero_optimization.stage: 3 -> zero.stage=3: wins over zero=stage2 (a group choice names no key; "
            "zero.stage=... on the command line wins over the file)") in text
    prepared, _ = dry_run(tmp_path, f"deepspeed.from_file={path}", "zero.stage=2")
    assert prepared.ds_config["zero_optimization"]["stage"] == 2


def test_compile_keys_are_named_by_their_block(tmp_path):
    """axolotl's zero1_torch_compile.json: DeepSpeed 0.19.8's CompileConfig refuses disable and backend; they were
    named deepspeed.disable and deepspeed.backend."""
    problems = refusal(tmp_path, f"deepspeed.from_file={IMPORTED / 'axolotl_zero1_torch_compile.json'}")
    assert [p.split(":")[0] for p in problems] == ["deepspeed.compile.disable=false",
                                                   "deepspeed.compile.backend=inductor"]


def test_a_yaml_syntax_error_is_one_problem(tmp_path):
    path = tmp_path / "acc.yaml"
    path.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n bad: [\n")
    problems = resolve([f"launcher.from_accelerate={path}"], fit="off").problems
    assert len(problems) == 1 and "cannot be read (not YAML" in problems[0], problems


def test_a_directory_given_as_a_file_says_so(tmp_path):
    problems = resolve([f"deepspeed.from_file={tmp_path}"], fit="off").problems
    assert problems == [f"deepspeed.from_file={tmp_path} is a directory. Give a DeepSpeed JSON file."]


def test_accelerates_zero3_model_only_file_composes_and_plans(tmp_path):
    """accelerate's tests/deepspeed/ds_config_zero3_model_only.json offloads the parameters alone (a ZeRO-3 layout
    DeepSpeed accepts): KeyError 'none/cpu' in the planner before."""
    from trl_ds.cli.plan import plan

    path = IMPORTED / "accelerate_tests_ds_config_zero3_model_only.json"
    source = json.loads(path.read_text())["zero_optimization"]
    prepared, _ = dry_run(tmp_path, f"deepspeed.from_file={path}")
    zero = prepared.ds_config["zero_optimization"]
    assert (zero["stage"], zero["offload_param"]["device"], "offload_optimizer" in zero) == (
        source["stage"], source["offload_param"]["device"], False)
    assert prepared.plan["current"]["offload"] == "none/cpu"
    _, _, current, _ = plan([f"deepspeed.from_file={path}"])
    assert (current.setup.optimizer_offload, current.setup.param_offload) == ("none", "cpu")


def test_export_writes_parameters_offloaded_alone(tmp_path):
    from trl_ds.cli.export import export

    export(str(tmp_path / "out"), ["zero=stage3", "offload.param=cpu"], auto=False)
    zero = json.loads((tmp_path / "out" / "ds_config.json").read_text())["zero_optimization"]
    assert zero["offload_param"]["device"] == "cpu" and "offload_optimizer" not in zero


def test_a_relative_deepspeed_config_file_is_the_working_folders(tmp_path, monkeypatch):
    """accelerate launch hands deepspeed_config_file on as ACCELERATE_DEEPSPEED_CONFIG_FILE, opened from the working
    folder (commands/launch.py, utils/dataclasses.py DeepSpeedPlugin)."""
    (tmp_path / "configs").mkdir()
    shutil.copy(IMPORTED / "llamafactory_ds_z2_config.json", tmp_path / "configs" / "ds.json")
    (tmp_path / "yamls").mkdir()
    path = tmp_path / "yamls" / "acc.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no",
                                    "deepspeed_config": {"deepspeed_config_file": "configs/ds.json"}}))
    monkeypatch.chdir(tmp_path)
    prepared, _ = dry_run(tmp_path, f"launcher.from_accelerate={path}")
    assert prepared.ds_config["zero_optimization"]["stage"] == 2


def test_optimizer_and_parameter_nvme_paths_stay_apart(tmp_path):
    """An accelerate YAML with offload_optimizer_nvme_path and another offload_param_nvme_path: accelerate's
    DeepSpeedPlugin writes each into its own block (utils/dataclasses.py); trl_ds wrote the parameter path into both."""
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no",
                                    "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "nvme",
                                                         "offload_param_device": "nvme",
                                                         "offload_optimizer_nvme_path": str(tmp_path / "opt"),
                                                         "offload_param_nvme_path": str(tmp_path / "param")}}))
    prepared, _ = dry_run(tmp_path, f"launcher.from_accelerate={path}")
    zero = prepared.ds_config["zero_optimization"]
    assert (zero["offload_optimizer"]["nvme_path"], zero["offload_param"]["nvme_path"]) == (
        str(tmp_path / "opt"), str(tmp_path / "param"))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(prepared.ds_config))
    again, _ = dry_run(tmp_path, f"deepspeed.from_file={ds}")  # a DeepSpeed JSON keeps them apart too
    zero = again.ds_config["zero_optimization"]
    assert (zero["offload_optimizer"]["nvme_path"], zero["offload_param"]["nvme_path"]) == (
        str(tmp_path / "opt"), str(tmp_path / "param"))


def test_a_refusal_names_the_file_and_key_each_value_came_from(tmp_path):
    """A batch a file fixes that the cluster cannot make: the refusal named trainer.* and batch.* keys the user never
    typed, and not the file."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                "gradient_accumulation_steps": "auto"}))
    (problem,) = refusal(tmp_path, f"deepspeed.from_file={path}")
    assert problem.endswith(f"(batch.global_size: deepspeed.from_file={path}'s train_batch_size; "
                            f"trainer.per_device_train_batch_size: deepspeed.from_file={path}'s "
                            f"train_micro_batch_size_per_gpu)"), problem
