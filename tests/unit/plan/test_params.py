"""Parameter counts equal a transformers meta-device instantiation counted here (and PEFT's LoRA adapters), exact to
the parameter; the presets' counts ship with the package (trl_ds/plan/preset_counts.json, scripts/preset_counts.py)
and hold exactly the presets, each equal to a build with the installed transformers."""
import glob
import json
import os

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from trl_ds.config.model_source import preset_config
from trl_ds.errors import ConfigError
from trl_ds.plan import count_cache
from trl_ds.plan.params import Architecture, architecture, count_lora, count_params, linear_shapes, read_hf_config
from trl_ds.worker.models import hf_config

MODELS = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob("conf/model/*.yaml"))


def instantiate(config):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def largest_module(model) -> int:
    """DeepSpeed's L_max: params held directly by one module (stage3.model_to_params)."""
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


def unique_params(model) -> int:
    # On the meta device every data_ptr() is 0, so count by identity; parameters() already skips tied duplicates.
    return sum({id(p): p.numel() for p in model.parameters()}.values())


def first_layer_linears(model) -> dict:
    layer = model.model.layers[0]
    return {n.rsplit(".", 1)[-1]: (m.in_features, m.out_features) for n, m in layer.named_modules()
            if isinstance(m, torch.nn.Linear)}


@pytest.mark.parametrize("name", MODELS)
def test_every_shipped_model_counts_exactly(compose_cfg, name):
    """Read from the shipped counts (no build), each equal to what the installed transformers builds."""
    model_cfg = compose_cfg([f"model={name}"]).model
    assert json.dumps(preset_config(model_cfg), sort_keys=True) in count_cache.shipped()
    model = instantiate(hf_config(model_cfg))
    arch = architecture(model_cfg)
    counts = count_params(arch)
    assert counts.total == unique_params(model)
    assert counts.largest_module == largest_module(model)
    assert sorted(counts.tensors) == sorted(p.numel() for p in model.parameters())
    assert linear_shapes(arch) == first_layer_linears(model)


def test_the_shipped_counts_are_the_presets_and_nothing_else(compose_cfg):
    presets = {json.dumps(preset_config(compose_cfg([f"model={name}"]).model), sort_keys=True) for name in MODELS}
    assert set(count_cache.shipped()) == presets


def test_shipped_models_are_all_covered():
    assert {"tiny", "llama3-70b", "qwen2.5-0.5b", "qwen2.5-14b", "mistral-7b", "mixtral-8x7b", "qwen3-30b-a3b",
            "deepseek-v2-lite", "gemma2-9b", "phi3-mini", "qwen2.5-7b"} <= set(MODELS)


def test_known_totals_match_the_published_sizes(compose_cfg):
    published = {"tiny": 869_504, "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496,
                 "qwen2.5-0.5b": 494_032_768, "qwen2.5-7b": 7_615_616_512, "mixtral-8x7b": 46_702_792_704,
                 "qwen3-30b-a3b": 30_532_122_624, "deepseek-v2-lite": 15_706_484_224, "gemma2-9b": 9_241_705_984,
                 "phi3-mini": 3_821_079_552}  # the model cards' safetensors totals
    totals = {name: count_params(architecture(compose_cfg([f"model={name}"]).model)).total for name in published}
    assert totals == published


@pytest.mark.parametrize("model_type,extra", [
    ("llama", {"attention_bias": True, "mlp_bias": True, "head_dim": 48}),
    ("mistral", {"head_dim": 40, "attention_bias": True}),  # ignored by Mistral
    ("qwen2", {"tie_word_embeddings": True}),
    ("qwen3", {"head_dim": 24, "attention_bias": True}),
])
def test_user_config_json_counts_exactly(tmp_path, model_type, extra):
    raw = {"model_type": model_type, "vocab_size": 1000, "hidden_size": 96, "intermediate_size": 200,
           "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    model = instantiate(AutoConfig.for_model(**raw))
    counts = count_params(read_hf_config(str(tmp_path)))  # a folder holding config.json works too
    assert counts.total == unique_params(model)
    assert counts.largest_module == largest_module(model)


def test_persistent_params_are_the_small_tensors(compose_cfg):
    counts = count_params(architecture(compose_cfg(["model=tiny"]).model))
    # tiny: every tensor (largest 65,536 elements) is below the default 100,000 threshold
    assert counts.persistent(100_000) == counts.total
    # only the norms (128 each: 2 per layer × 4 layers + final) are below 1,000
    assert counts.persistent(1_000) == 9 * 128


def test_unreadable_config_json_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"model.config_path=.*nope.json cannot be read as a model's config.json "
                                          r".*model.name_or_path=/path/to/model.*model.config_path=/path/to/config"):
        read_hf_config(str(tmp_path / "nope.json"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(ConfigError, match=r"config.json has no model_type, so the architecture is unknown"):
        read_hf_config(str(path))


def test_impossible_dimensions_are_one_clear_error(tmp_path, compose_cfg):
    with pytest.raises(ConfigError, match=r"model=tiny: num_attention_heads=4 is not a multiple of "
                                          r"num_key_value_heads=3\."):
        architecture(compose_cfg(["model.num_key_value_heads=3"]).model)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 10, "hidden_size": 0, "intermediate_size": 8,
                                "num_hidden_layers": 1, "num_attention_heads": 2}))
    with pytest.raises(ConfigError, match=r"model.config_path=.*config.json: hidden_size=0 must be at least 1\."):
        architecture(compose_cfg([f"model.config_path={path}"]).model)


ATTENTION, ALL_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj"], ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"]


@pytest.mark.parametrize("model_type,r,targets", [("llama", 8, ATTENTION), ("llama", 4, ALL_LINEARS),
                                                  ("qwen2", 16, ["v_proj", "down_proj"])])
def test_lora_adapters_count_exactly_as_peft_adds_them(model_type, r, targets):
    from peft import LoraConfig, get_peft_model

    dims = dict(vocab_size=500, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=24)
    model = get_peft_model(AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **dims)),
                           LoraConfig(r=r, target_modules=targets))
    arch = Architecture(model_type=model_type, **dims)
    adapters = count_lora(arch, r, targets)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert adapters.total == sum(p.numel() for p in trainable)
    assert count_params(arch).total == sum(p.numel() for p in model.parameters() if not p.requires_grad)
    assert adapters.largest == max(p.numel() for p in trainable)
