"""peft=qlora asked for by name, TRL's ModelConfig quantization fields (trainer.args, a recipe) moved onto peft.*,
and what the run dir hands a rank: trainer.yaml's ModelConfig fields, which TRL's own parser and
get_quantization_config turn into the BitsAndBytesConfig the worker loads with."""
from pathlib import Path

import pytest
import yaml

from trl_ds.check.trl_recipe import apply_recipe
from trl_ds.config.batch import resolve_batch
from trl_ds.config.quantization import map_model_config_fields
from trl_ds.rundir.trainer_config import build_trainer_args

IMPORTED = Path(__file__).resolve().parents[2] / "data" / "imported"


def test_peft_qlora_is_lora_over_a_4bit_nf4_double_quantized_base(compose_cfg):
    p = compose_cfg(["peft=qlora"]).peft
    assert (p.name.value, p.load_in_4bit, p.load_in_8bit, p.bnb_4bit_quant_type.value) == ("qlora", True, False, "nf4")
    assert (p.bnb_4bit_use_double_quant, p.bnb_4bit_compute_dtype, p.bnb_4bit_quant_storage) == (True, None, None)


def test_model_config_fields_in_trainer_args_move_onto_peft_keys(compose_cfg):
    """`python -m trl_ds peft=lora +trainer.args.load_in_4bit=true` (refused before #43) plans and trains QLoRA."""
    cfg = compose_cfg(["peft=lora", "+trainer.args.load_in_4bit=true", "+trainer.args.use_bnb_nested_quant=true",
                       "+trainer.args.bnb_4bit_quant_type=fp4", "+trainer.args.bnb_4bit_quant_storage=float32"])
    lines, problems = map_model_config_fields(cfg, [])
    assert problems == [] and dict(cfg.trainer.args) == {}
    assert (cfg.peft.load_in_4bit, cfg.peft.bnb_4bit_use_double_quant, cfg.peft.bnb_4bit_quant_type.value,
            cfg.peft.bnb_4bit_quant_storage) == (True, True, "fp4", "float32")
    assert lines == ["trl_ds: TRL's ModelConfig quantization fields:",
                     "  trainer.args.load_in_4bit=true → peft.load_in_4bit=true",
                     "  trainer.args.bnb_4bit_quant_type=fp4 → peft.bnb_4bit_quant_type=fp4",
                     "  trainer.args.use_bnb_nested_quant=true → peft.bnb_4bit_use_double_quant=true",
                     "  trainer.args.bnb_4bit_quant_storage=float32 → peft.bnb_4bit_quant_storage=float32"]


def test_the_issues_opening_command_builds_a_qlora_run_dir(tmp_path):
    """`python -m trl_ds peft=lora +trainer.args.load_in_4bit=true` through build() as a dry run makes it: the field
    is mapped and printed, trainer.yaml asks TRL for a 4-bit base with LoRA, and the plan holds the 4-bit bytes by
    hand: 979,456 of parameters (tests/unit/plan/test_qlora_plan.py) and, without double quantization (TRL's default
    use_bnb_nested_quant=false), an fp32 absmax per 64 elements and the 16-value fp32 code per weight: 4 × 786,432
    / 64 + 28 × 64 = 50,944."""
    from trl_ds.cli.app import build
    from trl_ds.config.compose import compose

    overrides = ["peft=lora", "+trainer.args.load_in_4bit=true", "model.intermediate_size=384"]
    prepared = build(compose(overrides), str(tmp_path / "run"), launching=False, command_line=overrides)
    assert prepared.recipe_text == ("trl_ds: TRL's ModelConfig quantization fields:\n"
                                    "  trainer.args.load_in_4bit=true → peft.load_in_4bit=true")
    assert {k: prepared.trainer_args[k] for k in ("use_peft", "load_in_4bit", "use_bnb_nested_quant")} == {
        "use_peft": True, "load_in_4bit": True, "use_bnb_nested_quant": False}
    assert prepared.plan["current"]["after_step_bytes"]["params"] == {"device": 979_456 + 4 * 786_432 // 64 + 28 * 64}


def test_a_peft_key_on_the_command_line_wins_and_a_bad_value_is_named(compose_cfg):
    overrides = ["peft=qlora", "peft.bnb_4bit_use_double_quant=false", "+trainer.args.use_bnb_nested_quant=true",
                 "+trainer.args.bnb_4bit_quant_type=nf5"]
    cfg = compose_cfg(overrides)
    lines, problems = map_model_config_fields(cfg, overrides)
    assert cfg.peft.bnb_4bit_use_double_quant is False
    assert "  trainer.args.use_bnb_nested_quant=true → peft.bnb_4bit_use_double_quant: overridden on the command " \
           "line" in lines
    assert len(problems) == 1 and problems[0].startswith(
        "trainer.args.bnb_4bit_quant_type=nf5 (TRL's ModelConfig, trl_ds's peft.bnb_4bit_quant_type): ")
    assert "nf5" in problems[0] and "nf4" in problems[0] and "fp4" in problems[0]  # OmegaConf's enum message


def test_the_alignment_handbook_qlora_recipe_imports_its_model_arguments(compose_cfg, tmp_path):
    """recipes/zephyr-7b-beta/sft/config_qlora.yaml (huggingface/alignment-handbook), verbatim, through the recipe
    importer and the ModelConfig mapping in build()'s order: its ModelConfig part (load_in_4bit, use_peft, lora_*,
    torch_dtype) lands on peft.* and precision, and trainer.yaml's quantization fields are what TRL's own parser reads
    from the recipe (its ModelConfig defaults: nf4, no nested quantization, the dtype), the storage excepted (trl_ds
    stores in the training dtype, as PEFT's ZeRO-3 guide sets it). Refused are two TrainingArguments fields
    transformers 5 removed, not the QLoRA."""
    from transformers import HfArgumentParser
    from trl import ModelConfig

    recipe = IMPORTED / "alignment_handbook_zephyr_sft_config_qlora.yaml"
    cfg = compose_cfg([f"trainer.from_trl_config={recipe}"])
    _, recipe_problems = apply_recipe(cfg, [])
    lines, problems = map_model_config_fields(cfg, [])
    assert [p.split(": ")[1] for p in recipe_problems] == ["overwrite_output_dir", "warmup_ratio"] and problems == []
    assert lines == ["trl_ds: TRL's ModelConfig quantization fields:",
                     "  trainer.args.load_in_4bit=true → peft.load_in_4bit=true"]
    assert (cfg.peft.name.value, cfg.peft.r, cfg.peft.lora_alpha, cfg.peft.lora_dropout, list(cfg.peft.target_modules),
            cfg.precision.dtype.value) == ("lora", 16, 16, 0.05, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"], "bf16")
    fields = yaml.safe_load(recipe.read_text())
    model_fields = {k: v for k, v in fields.items() if k in ("model_name_or_path", "load_in_4bit", "use_peft")}
    # the recipe's torch_dtype is ModelConfig.dtype since transformers 5 renamed it (the importer maps it so too)
    trl = HfArgumentParser(ModelConfig).parse_dict({**model_fields, "dtype": fields["torch_dtype"]})[0]
    args = build_trainer_args(cfg, resolve_batch(4, 2, None, None), str(tmp_path))
    assert {k: args[k] for k in ("load_in_4bit", "bnb_4bit_quant_type", "use_bnb_nested_quant", "dtype")} == {
        "load_in_4bit": trl.load_in_4bit, "bnb_4bit_quant_type": trl.bnb_4bit_quant_type,
        "use_bnb_nested_quant": trl.use_bnb_nested_quant, "dtype": trl.dtype} == {
        "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "use_bnb_nested_quant": False, "dtype": "bfloat16"}
    assert args["bnb_4bit_quant_storage"] == "bfloat16" and trl.bnb_4bit_quant_storage is None


def test_trainer_yaml_carries_modelconfig_names_that_trls_parser_turns_into_the_bnb_config(compose_cfg, tmp_path):
    """The oracle is TRL's own path (`trl sft --config trainer.yaml`): its parser, then get_quantization_config,
    as the worker's model_kwargs calls it."""
    import torch
    from transformers import TrainingArguments
    from trl.scripts.sft import make_parser

    from trl_ds.worker.trainers import model_kwargs

    cfg = compose_cfg(["peft=qlora", "zero=stage3"])
    args = build_trainer_args(cfg, resolve_batch(2, 2, None, None), str(tmp_path))
    assert {k: args[k] for k in ("load_in_4bit", "bnb_4bit_quant_type", "use_bnb_nested_quant",
                                 "bnb_4bit_quant_storage", "dtype")} == {
        "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "use_bnb_nested_quant": True,
        "bnb_4bit_quant_storage": "float32", "dtype": "float32"}
    model_args = make_parser().parse_dict({k: v for k, v in args.items() if k in (
        "model_name_or_path", "load_in_4bit", "bnb_4bit_quant_type", "use_bnb_nested_quant",
        "bnb_4bit_quant_storage", "dtype", "use_cpu")} | {"output_dir": str(tmp_path), "dataset_name": "x"})[2]
    bnb = model_kwargs(model_args, TrainingArguments(output_dir=str(tmp_path), use_cpu=True))["quantization_config"]
    assert (bnb.load_in_4bit, bnb.bnb_4bit_quant_type, bnb.bnb_4bit_use_double_quant) == (True, "nf4", True)
    assert (bnb.bnb_4bit_compute_dtype, bnb.bnb_4bit_quant_storage) == (torch.float32, torch.float32)


@pytest.mark.parametrize("overrides,expected", [
    (["peft=lora"], {}),
    (["peft=lora", "peft.load_in_8bit=true"], {"load_in_8bit": True, "dtype": "float32"}),
])
def test_lora_alone_writes_no_quantization_and_8bit_writes_load_in_8bit(overrides, expected, compose_cfg, tmp_path):
    args = build_trainer_args(compose_cfg(overrides), resolve_batch(2, 2, None, None), str(tmp_path))
    names = ("load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage",
             "dtype")
    assert {k: args[k] for k in names if k in args} == expected
