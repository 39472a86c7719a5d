"""The checks read the model the run trains (#59's Why 6): LoRA's default targets follow the family as PEFT's own
defaults do, named targets are checked against that model's modules (BLOOM's query_key_value, GPT-2's Conv1D c_attn),
and a folder a rank cannot load (no weights, no tokenizer) is one line before spawn.

Expected targets: PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft/utils/constants.py: "bloom":
["query_key_value"], "gpt2": ["c_attn"]), written here as PEFT states them."""
import pytest

from trl_ds.check.resolve import resolve
from trl_ds.cli.app import build
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError


def folder(tmp_path, kind):
    from transformers import BloomConfig, GPT2Config

    made = {"bloom": lambda: BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=512),
            "gpt2": lambda: GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, bos_token_id=0,
                                       eos_token_id=0)}[kind]()
    path = tmp_path / kind
    made.save_pretrained(path)
    return path


def dry_run(tmp_path, *overrides):
    cfg = compose(list(overrides))
    return build(cfg, str(tmp_path / "run"), launching=False, command_line=list(overrides))


@pytest.mark.parametrize("kind, targets", [("bloom", ["query_key_value"]), ("gpt2", ["c_attn"])])
def test_default_targets_follow_the_family_as_peft_does(tmp_path, kind, targets):
    """peft=lora's default q_proj,k_proj,v_proj,o_proj passed every check on a BLOOM folder, then each rank failed
    in PEFT ("Target modules {'q_proj', ...} not found in the base model")."""
    prepared = dry_run(tmp_path, f"model.name_or_path={folder(tmp_path, kind)}", "peft=lora")
    assert prepared.trainer_args["lora_target_modules"] == [rf"(.*\.)?{targets[0]}"]  # one target: see below
    assert f"peft.target_modules=[{','.join(targets)}], PEFT's own default for {kind}" in prepared.recipe_text


@pytest.mark.parametrize("kind, target", [("bloom", "query_key_value"), ("gpt2", "c_attn")])
def test_a_named_target_of_the_model_is_accepted(tmp_path, kind, target):
    """Refused before as "must name linear layers of model=tiny" (the preset, not the folder; and GPT-2's c_attn is
    transformers' Conv1D, which PEFT adapts)."""
    prepared = dry_run(tmp_path, f"model.name_or_path={folder(tmp_path, kind)}", "peft=lora",
                       f"peft.target_modules=[{target}]")
    assert prepared.trainer_args["lora_target_modules"] == [rf"(.*\.)?{target}"]


def test_one_target_is_written_as_the_expression_peft_matches():
    """TRL's ModelConfig makes a one-item lora_target_modules its item (trl/trainer/model_config.py __post_init__),
    and PEFT matches a string as a regular expression against each module's full name (tuners_utils
    check_target_module_exists: re.fullmatch), where a list matches a name or a name ending in ".name". The run
    failed in PEFT with ["query_key_value"] ("Target modules query_key_value not found in the base model")."""
    import re

    from trl_ds.rundir.trainer_config import lora_target_modules

    (one,) = lora_target_modules(["query_key_value"])
    assert re.fullmatch(one, "transformer.h.0.self_attention.query_key_value")
    assert re.fullmatch(one, "query_key_value") and not re.fullmatch(one, "transformer.h.0.xquery_key_value")
    assert lora_target_modules(["q_proj", "v_proj"]) == ["q_proj", "v_proj"]


def test_a_target_the_model_lacks_names_the_folder_and_its_modules(tmp_path):
    path = folder(tmp_path, "bloom")
    with pytest.raises(ConfigError) as err:
        dry_run(tmp_path, f"model.name_or_path={path}", "peft=lora", "peft.target_modules=[q_proj]")
    assert (f"peft.target_modules=[q_proj] must name linear layers of model.name_or_path={path}; q_proj is not one. "
            f"Use some of: peft.target_modules=[query_key_value,dense,dense_h_to_4h,dense_4h_to_h].") in \
        err.value.problems


def test_llamas_default_targets_stay(tmp_path):
    run = resolve(["peft=lora"], fit="off")
    assert list(run.cfg.peft.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"] and not run.lines


@pytest.mark.parametrize("files, missing", [
    ((), "holds no weights (model.safetensors or pytorch_model.bin) and no tokenizer files"),
    (("model.safetensors",), "holds no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, ...)"),
    (("tokenizer.json",), "holds no weights (model.safetensors or pytorch_model.bin):"),
])
def test_a_folder_a_rank_cannot_load_is_one_line_before_spawn(tmp_path, files, missing):
    """config.json alone, or weights without a tokenizer: each rank failed after it started ("no file named
    model.safetensors", "You need to have sentencepiece or tiktoken installed")."""
    path = folder(tmp_path, "bloom")
    for name in files:
        (path / name).write_bytes(b"")
    cfg = compose([f"model.name_or_path={path}"])
    with pytest.raises(ConfigError) as err:
        build(cfg, str(tmp_path / "run"), launching=True, command_line=[f"model.name_or_path={path}"])
    assert any(p.startswith(f"model.name_or_path={path} {missing}") for p in err.value.problems), err.value.problems
