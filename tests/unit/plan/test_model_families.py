"""Every family's planner count equals an instantiation of the model with transformers, counted here, exact to the
parameter, from a config.json folder (presets: tests/unit/plan/test_params.py); MoE models count all experts in their
total and the routed ones in their active parameters; what the activation model reads about each layer (dense or MoE,
the experts' widths) is transformers' own."""
import json
import os

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from trl_ds.errors import ConfigError
from trl_ds.plan.params import config_dict, count_params, expert_width, is_moe_layer, read_hf_config, shared_width

SMALL = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
MLA = {"q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 12,
       "moe_intermediate_size": 32, "n_routed_experts": 6, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}
# One config per family, each with what makes it differ: biases, head_dim, QK-norm, tied embeddings, MLA,
# shared experts, dense-then-MoE layer mixes, linear attention, GPT-style fused QKV.
FAMILIES = {
    "llama": {"attention_bias": True, "mlp_bias": True, "head_dim": 12},
    "mistral": {"head_dim": 10},
    "qwen2": {"tie_word_embeddings": True},
    "qwen3": {"head_dim": 6, "attention_bias": True},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                  "shared_expert_intermediate_size": 40, "mlp_only_layers": [0], "decoder_sparse_step": 1},
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 20, "head_dim": 12,
                  "decoder_sparse_step": 2},
    "deepseek_v2": {**MLA, "q_lora_rank": None, "n_shared_experts": 2, "first_k_dense_replace": 1},
    "deepseek_v3": {**MLA, "n_shared_experts": 1, "first_k_dense_replace": 2},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "attention_bias": True},
    "gemma3_text": {"head_dim": 16, "tie_word_embeddings": False},
    "phi3": {},
    "olmo2": {"attention_bias": True},
    "starcoder2": {},  # use_bias and tied embeddings by default
    "granite": {"attention_bias": True, "mlp_bias": True},
    "olmoe": {"num_experts": 6, "num_experts_per_tok": 2, "attention_bias": True},
    "phimoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "lm_head_bias": True, "attention_bias": True},
    "glm4": {"head_dim": 12},  # q/k/v biased by default, o_proj never
    "olmo3": {"attention_bias": True},  # olmo2's modules
    "ministral": {"head_dim": 10},  # mistral's
    "ministral3": {},  # mistral's, head_dim 128 by default
    "hunyuan_v1_dense": {"head_dim": 12},  # qwen3's
    "smollm3": {},  # llama's, tied by default
    "glm4_moe": {"n_routed_experts": 6, "num_experts_per_tok": 2, "n_shared_experts": 2, "moe_intermediate_size": 20,
                 "first_k_dense_replace": 1, "head_dim": 12, "n_group": 1, "topk_group": 1},
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 12},  # biases on by default
    "gpt_neox": {},  # biases on, untied by default
    "falcon": {},  # multi-query, parallel attention, no biases, tied by default
    "gpt2": {},  # its own key names: GPT2 below
    "qwen3_next": {"num_experts": 4, "num_experts_per_tok": 2, "head_dim": 12, "moe_intermediate_size": 20,
                   "shared_expert_intermediate_size": 28, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 6, "linear_value_head_dim": 10, "linear_conv_kernel_dim": 3,
                   "full_attention_interval": 2},
}
# GPT-2's config.json names (n_embd, n_layer, n_head, n_positions), tied by default
GPT2 = {"vocab_size": 300, "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 40, "bos_token_id": 1,
        "eos_token_id": 2}

# The other switches of those families.
VARIANTS = [("starcoder2", {"use_bias": False, "tie_word_embeddings": False}), ("granite", {"head_dim": 12}),
            ("olmoe", {"tie_word_embeddings": True}), ("phimoe", {"num_key_value_heads": 8}),
            ("glm4", {"attention_bias": False, "tie_word_embeddings": True}),
            ("gpt_oss", {"attention_bias": False, "tie_word_embeddings": True}),
            ("gpt_neox", {"attention_bias": False, "tie_word_embeddings": True}),
            ("gpt2", {"tie_word_embeddings": False, "n_inner": 80}),
            ("falcon", {"multi_query": False, "parallel_attn": False, "ffn_hidden_size": 80, "bias": True,
                        "tie_word_embeddings": False}),
            ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),  # Falcon-40B's: two parallel norms
            ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 4, "num_ln_in_parallel_attn": 1}),
            ("qwen3_next", {"attention_bias": True, "tie_word_embeddings": True, "mlp_only_layers": [1],
                            "decoder_sparse_step": 1, "layer_types": ["full_attention", "linear_attention"] * 2}),
            ("qwen3_next", {"num_experts": 0}),
            ("olmo3", {"tie_word_embeddings": True}), ("ministral", {"attention_bias": True}),
            ("ministral3", {"head_dim": 12, "tie_word_embeddings": True}),
            ("hunyuan_v1_dense", {"attention_bias": True, "tie_word_embeddings": True}),
            ("smollm3", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}),
            ("glm4_moe", {"attention_bias": True, "use_qk_norm": True, "tie_word_embeddings": True,
                          "first_k_dense_replace": 0})]  # every MLP dense


def family_config(model_type, extra=None):
    """The family's small config.json: SMALL's dimensions (GPT-2's own key names) and the family's switches."""
    if model_type == "gpt2":
        return {"model_type": "gpt2", **GPT2, **(extra or {})}
    return {"model_type": model_type, **SMALL, **FAMILIES[model_type], **(extra or {})}


def instantiate(config):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def meta_counts(model):
    """(total, largest module, routed-expert parameters): parameters() already skips tied duplicates; L_max is
    DeepSpeed's (stage3.model_to_params), the params one module holds directly."""
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return total, largest, experts


def write_config(folder, raw):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f)
    return str(folder)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_config_json_folder_counts_exactly(tmp_path, model_type):
    raw = family_config(model_type)
    total, largest, experts = meta_counts(instantiate(AutoConfig.for_model(**raw)))
    counts = count_params(read_hf_config(write_config(tmp_path / "m", raw)))
    assert counts.method == "meta"
    assert (counts.total, counts.largest_module) == (total, largest)
    arch = read_hf_config(str(tmp_path / "m"))
    if experts:  # only num_experts_per_tok of the experts' parameters work on a token
        assert counts.active == total - experts * (arch.num_experts - arch.experts_per_token) // arch.num_experts
    else:
        assert counts.active == total


def test_mixtral_active_parameters_by_hand(tmp_path):
    raw = {"model_type": "mixtral", **SMALL, **FAMILIES["mixtral"]}
    counts = count_params(read_hf_config(write_config(tmp_path / "m", raw)))
    h, f, layers = 64, 96, 4
    attention = 2 * h * h + 2 * h * (2 * 8)  # q and o: 8 heads × 8; k and v: 2 kv heads × 8
    expert, router, norms = 3 * h * f, 4 * h, 2 * h
    embeddings = 2 * 300 * h + h  # embedding, untied lm_head, final norm
    assert counts.total == embeddings + layers * (attention + 4 * expert + router + norms)
    assert counts.active == embeddings + layers * (attention + 2 * expert + router + norms)


@pytest.mark.parametrize("model_type,extra", [("qwen2_moe", {}), ("qwen3_moe", {}), ("deepseek_v2", {}),
                                              ("deepseek_v3", {}), ("glm4_moe", {}), ("mixtral", {}),
                                              ("qwen3_next", {}), ("qwen2_moe", {"decoder_sparse_step": 2})])
def test_what_the_activation_model_reads_about_each_layer_is_what_transformers_builds(tmp_path, model_type, extra):
    """Which layers are MoE, one routed expert's width and the shared experts' width, from the module shapes."""
    raw = family_config(model_type, extra)
    model = instantiate(AutoConfig.for_model(**raw))
    arch = read_hf_config(write_config(tmp_path / "m", raw))
    layers, h, config = model.model.layers, raw["hidden_size"], config_dict(arch)
    assert [is_moe_layer(config, i) for i in range(len(layers))] == [hasattr(x.mlp, "experts") for x in layers]
    mlp = next(x.mlp for x in layers if hasattr(x.mlp, "experts"))
    routed = sum(p.numel() for p in mlp.experts.parameters())  # gate, up and down of every expert
    assert routed == 3 * arch.num_experts * h * expert_width(config)
    shared = getattr(mlp, "shared_expert", None) or getattr(mlp, "shared_experts", None)
    assert (sum(p.numel() for p in shared.parameters()) if shared else 0) == 3 * h * shared_width(config)
    assert arch.routed_width == arch.experts_per_token * expert_width(config) + shared_width(config)


@pytest.mark.parametrize("model_type,extra", VARIANTS)
def test_variants_of_the_families_count_exactly_from_their_config(tmp_path, model_type, extra):
    raw = family_config(model_type, extra)
    total, largest, _ = meta_counts(instantiate(AutoConfig.for_model(**raw)))
    counts = count_params(read_hf_config(write_config(tmp_path / "m", raw)))
    assert (counts.method, counts.total, counts.largest_module) == ("meta", total, largest)


# configs that once needed formulas of their own: dory's tied lm_head keeps its logit_scale; flint's prelu activation
# holds a tensor; gemma3n's MLP widths differ by layer
@pytest.mark.parametrize("model_type,extra", [
    ("dory", {"tie_word_embeddings": True}),
    ("flint", {"num_experts": 0, "hidden_act": "prelu"}),
    ("gemma3n_text", {"intermediate_size": [96, 192, 96, 96], "num_kv_shared_layers": 0})])
def test_configs_with_odd_layers_count_exactly(tmp_path, model_type, extra):
    raw = {"model_type": model_type, **SMALL, **extra}
    total, largest, _ = meta_counts(instantiate(AutoConfig.for_model(**raw)))
    counts = count_params(read_hf_config(write_config(tmp_path / "m", raw)))
    assert (counts.method, counts.total, counts.largest_module, counts.active) == ("meta", total, largest, total)


def test_a_model_transformers_cannot_build_is_one_clear_error(tmp_path):
    folder = write_config(tmp_path / "m", {"model_type": "no_such_family", "hidden_size": 8})
    with pytest.raises(ConfigError, match=r"model_type 'no_such_family' is not a causal LM that transformers can "
                                          r"build here .*model.name_or_path=.*model.config_path="):
        count_params(read_hf_config(folder))


def test_a_pad_token_outside_the_vocabulary_is_one_clear_error_not_a_traceback(tmp_path):
    """kimi_linear's default pad_token_id (163839) with a 3000-token vocabulary: torch's nn.Embedding asserts, which
    once ended the plan in a traceback."""
    folder = write_config(tmp_path / "m", {"model_type": "kimi_linear", "vocab_size": 3000, "hidden_size": 128,
                                           "num_hidden_layers": 2, "num_attention_heads": 4})
    with pytest.raises(ConfigError, match=r"model_type 'kimi_linear' is not a causal LM that transformers can build "
                                          r"here \(AssertionError: Padding_idx must be within num_embeddings\)"):
        count_params(read_hf_config(folder))


def test_a_model_needing_a_package_that_is_not_installed_names_it(tmp_path):
    """gemma3n's vision tower needs timm, which trl_ds does not install; transformers' message starts with a newline,
    and the error once read "(ImportError: )"."""
    folder = write_config(tmp_path / "m", {"model_type": "gemma3n"})
    with pytest.raises(ConfigError, match=r"model_type 'gemma3n' is not a causal LM that transformers can build here "
                                          r"\(ImportError: TimmWrapperModel requires the timm library"):
        count_params(read_hf_config(folder))


def test_an_attention_free_model_is_one_clear_error_not_a_traceback(tmp_path):
    folder = write_config(tmp_path / "m", {"model_type": "mamba", "vocab_size": 320, "hidden_size": 64,
                                           "num_hidden_layers": 2})
    with pytest.raises(ConfigError, match=r"model_type 'mamba' has no top-level num_attention_heads: .*"
                                          r"model.name_or_path=.*model.config_path="):
        count_params(read_hf_config(folder))


def test_a_config_json_transformers_wrote_with_infinity_counts_exactly(tmp_path):
    """transformers 5 writes float("inf") as {"__float__": "Infinity"} (nemotron_h's time_step_limit); read back
    as-is, the config failed its own validation and the plan ended in a traceback."""
    config = AutoConfig.for_model("nemotron_h", vocab_size=320, num_hidden_layers=4,
                                  hybrid_override_pattern="M*-M")
    config.save_pretrained(tmp_path / "m")
    assert '"__float__": "Infinity"' in (tmp_path / "m" / "config.json").read_text()
    total, largest, _ = meta_counts(instantiate(config))
    counts = count_params(read_hf_config(str(tmp_path / "m")))
    assert (counts.total, counts.largest_module) == (total, largest)


def test_a_config_transformers_validation_refuses_is_one_clear_error(tmp_path):
    folder = write_config(tmp_path / "m", {"model_type": "falcon_h1", "hidden_size": 64, "mamba_n_heads": 7})
    with pytest.raises(ConfigError, match=r"model_type 'falcon_h1' is not a causal LM that transformers can build "
                                          r"here \(StrictDataclassClassValidationError: .*model.config_path="):
        count_params(read_hf_config(folder))


@pytest.mark.slow  # every causal LM transformers knows, built twice each: make test only
def test_every_causal_lm_transformers_knows_counts_exactly_or_is_one_clear_refusal(tmp_path, monkeypatch):
    """Each model_type of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES at its defaults, two layers: the count equals an
    instantiation counted here (every tensor), or the config is refused in one ConfigError (transformers cannot build
    it, or it has no attention heads at the top level); never a traceback. 5.24: 160 counted, 35 refused."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    monkeypatch.setenv("TRL_DS_CACHE", str(tmp_path / "cache"))
    counted = []
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            defaults = AutoConfig.for_model(model_type).to_dict()
        except Exception:  # noqa: BLE001 - a config class refusing its own defaults (gemma4_assistant)
            continue
        raw = {"model_type": model_type, **({"num_hidden_layers": 2} if "num_hidden_layers" in defaults else {})}
        try:
            counts = count_params(read_hf_config(write_config(tmp_path / model_type, raw)))
        except ConfigError as err:
            assert len(err.problems) == 1 and "model.config_path=" in err.problems[0], model_type
            continue
        model = instantiate(AutoConfig.for_model(**raw))
        assert sorted(counts.tensors) == sorted(p.numel() for p in model.parameters()), model_type
        counted.append(model_type)
    assert len(counted) >= 150
