"""The model_types counted from shape templates (trl_ds/plan/shape_templates.py, learned by scripts/shape_survey.py)
count exactly as the meta device does, torch-free: every held-out config the survey recorded (other sizes than it
learned from, random sets of switches), published configs built on the meta device here, and a plan under a second
without torch. A config the templates cannot vouch for goes to the meta device. A transformers upgrade fails the
version test until the survey is run again."""
import json
from importlib.metadata import version

import pytest
from conftest import REPO
from test_family_survey import assert_planned_without_torch_within_3x_a_preset

from trl_ds.errors import ConfigError
from trl_ds.plan import shape_templates
from trl_ds.plan.params import FAST_TYPES, count_params, from_config, layout

SURVEY = json.loads((REPO / "tests/data/shape_survey.json").read_text())
TEMPLATES = json.loads(shape_templates.DATA.read_text())
KEPT = sorted(t for t, r in SURVEY["model_types"].items() if r["kept"])


def test_the_survey_ran_with_the_installed_transformers():
    assert SURVEY["transformers"] == TEMPLATES["transformers"] == version("transformers"), (
        "transformers changed since the shape survey: run nice -n 19 .venv/bin/python scripts/shape_survey.py")


def test_the_templates_are_the_kept_survey_results_and_no_written_out_family():
    assert sorted(TEMPLATES["types"]) == KEPT
    assert not set(KEPT) & set(FAST_TYPES)
    assert len(KEPT) >= 85  # of the 153 model_types left to the meta device before the templates


@pytest.mark.parametrize("model_type", KEPT)
def test_every_held_out_config_counts_as_the_meta_device_did(model_type):
    for variant in SURVEY["model_types"][model_type]["held_out"]:
        arch = from_config(dict(variant["config"]), "survey")
        counts, lay = count_params(arch), layout(arch)
        assert counts.method == "template", variant["variant"]
        assert (counts.total, counts.largest_module, counts.active, lay.embedding, lay.lm_head) == (
            variant["total"], variant["largest"], variant["active"], variant["embedding"], variant["lm_head"]), (
            variant["variant"])


# Published config.json files (their dimensions and switches; layers cut to two where every layer repeats; keys of
# older transformers versions included). phi-1_5 leaves num_key_value_heads null (the heads), opt-350m projects its
# 512-wide embeddings to 1024, starcoderbase-1b shares one key and value head (multi_query) and sets n_inner.
PUBLISHED = {
    "microsoft/phi-2": {
        "model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "intermediate_size": 10240,
        "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "gelu_new",
        "max_position_embeddings": 2048, "partial_rotary_factor": 0.4, "qk_layernorm": False, "rope_theta": 10000.0,
        "resid_pdrop": 0.1, "embd_pdrop": 0.0, "layer_norm_eps": 1e-05, "tie_word_embeddings": False,
        "bos_token_id": 50256, "eos_token_id": 50256, "torch_dtype": "float16", "architectures": ["PhiForCausalLM"]},
    "microsoft/phi-1_5": {
        "model_type": "phi", "vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": None, "partial_rotary_factor": 0.5,
        "hidden_act": "gelu_new", "tie_word_embeddings": False, "max_position_embeddings": 2048, "rope_theta": 10000.0,
        "layer_norm_eps": 1e-05},
    "stabilityai/stablelm-2-1_6b": {
        "model_type": "stablelm", "vocab_size": 100352, "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 32, "use_qkv_bias": True,
        "partial_rotary_factor": 0.25, "rope_theta": 10000, "layer_norm_eps": 1e-05, "tie_word_embeddings": False,
        "qk_layernorm": False, "use_parallel_residual": False, "hidden_act": "silu", "max_position_embeddings": 4096,
        "bos_token_id": 100257, "eos_token_id": 100257, "torch_dtype": "float16"},
    "CohereForAI/c4ai-command-r-v01": {
        "model_type": "cohere", "vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528,
        "num_hidden_layers": 2, "num_attention_heads": 64, "num_key_value_heads": 64, "logit_scale": 0.0625,
        "use_qk_norm": False, "rope_theta": 8000000.0, "layer_norm_eps": 1e-05, "hidden_act": "silu",
        "max_position_embeddings": 8192, "tie_word_embeddings": True, "bos_token_id": 5, "eos_token_id": 255001,
        "pad_token_id": 0, "torch_dtype": "float16"},
    "bigscience/bloom-560m": {
        "model_type": "bloom", "vocab_size": 250880, "hidden_size": 1024, "n_layer": 2, "n_head": 16,
        "layer_norm_epsilon": 1e-05, "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
        "hidden_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
        "architectures": ["BloomForCausalLM"]},
    "bigcode/starcoderbase-1b": {
        "model_type": "gpt_bigcode", "vocab_size": 49152, "n_embd": 2048, "n_head": 16, "n_inner": 8192, "n_layer": 2,
        "n_positions": 8192, "multi_query": True, "activation_function": "gelu_pytorch_tanh", "attn_pdrop": 0.1,
        "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "scale_attn_weights": True,
        "attention_softmax_in_fp32": True, "scale_attention_softmax_in_fp32": True, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "bos_token_id": 0, "eos_token_id": 0, "architectures": ["GPTBigCodeForCausalLM"]},
    "facebook/opt-350m": {
        "model_type": "opt", "vocab_size": 50272, "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 2,
        "num_attention_heads": 16, "max_position_embeddings": 2048, "word_embed_proj_dim": 512,
        "do_layer_norm_before": False, "activation_function": "relu", "dropout": 0.1, "enable_bias": True,
        "layer_norm_elementwise_affine": True, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
        "torch_dtype": "float16"},
    # whole, as a public test suite copies it from the hub (transformers 4.40.2): the attention and expert layers
    # come by period (attention at 4, 12, 20, 28)
    "ai21labs/AI21-Jamba-1.5-Mini": {
        "model_type": "jamba", "architectures": ["JambaForCausalLM"], "attention_dropout": 0.0,
        "attn_layer_offset": 4, "attn_layer_period": 8, "bos_token_id": 1, "eos_token_id": [2, 518],
        "expert_layer_offset": 1, "expert_layer_period": 2, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "mamba_conv_bias": True, "mamba_d_conv": 4,
        "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2, "mamba_proj_bias": False,
        "max_position_embeddings": 262144, "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "num_logits_to_keep": 1, "output_router_logits": False,
        "pad_token_id": 0, "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True,
        "use_mamba_kernels": False, "vocab_size": 65536},
    # whole: the fields a public Rust loader's test gives as the checkpoint's (block_ff_dim, the alias LFM2's config
    # class takes for intermediate_size; tie_embedding; block_dim, conv_dim and use_pos_enc, which no code reads),
    # with the 16-layer conv/attention list a public Python test states for the 350M (the Rust test cut it to 3)
    "LiquidAI/LFM2-350M": {
        "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], "dtype": "bfloat16",
        "block_auto_adjust_ff_dim": True, "block_dim": 1024, "block_ff_dim": 6656, "block_ffn_dim_multiplier": 1.0,
        "block_mlp_init_scale": 1.0, "block_multiple_of": 256, "block_norm_eps": 1e-5, "block_out_init_scale": 1.0,
        "block_use_swiglu": True, "block_use_xavier_init": True, "bos_token_id": 1, "conv_L_cache": 3,
        "conv_bias": False, "conv_dim": 1024, "conv_use_xavier_init": True, "eos_token_id": 7, "hidden_size": 1024,
        "intermediate_size": 6656, "layer_types": ["conv", "conv", "full_attention"] * 3 + [
            "conv", "full_attention"] * 3 + ["conv"], "max_position_embeddings": 128000, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 8, "norm_eps": 1e-5, "pad_token_id": 0,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "tie_embedding": True,
        "use_cache": True, "use_pos_enc": True, "vocab_size": 65536},
    # the text_config of each (llama4's composite config is not a causal LM the planner plans): Scout puts the MoE
    # block in every layer, Maverick in every second (interleave_moe_layer_step), with a dense MLP in the others
    "meta-llama/Llama-4-Scout-17B-16E": {
        "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "use_qk_norm": True, "no_rope_layer_interval": 4, "attention_chunk_size": 8192, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-05, "pad_token_id": 200018, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False},
    "meta-llama/Llama-4-Maverick-17B-128E": {
        "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "use_qk_norm": False, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False},
    "LiquidAI/LFM2-8B-A1B": {  # as a public loader's test gives it
        "model_type": "lfm2_moe", "vocab_size": 65536, "hidden_size": 2048, "intermediate_size": 7168,
        "moe_intermediate_size": 1792, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 128000, "norm_eps": 1e-05, "conv_bias": False, "conv_L_cache": 3,
        "rope_theta": 1000000.0, "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4,
        "norm_topk_prob": True, "use_expert_bias": True, "routed_scaling_factor": 1.0, "eos_token_id": 7,
        "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv",
                        "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                        "full_attention", "conv", "conv", "full_attention", "conv", "conv"]},
    # whole, as a public inference library's test gives the checkpoint's config: layer 0 dense, MoE from layer 1 to
    # layer 27 (another public test adds head_dim 128, hidden // heads; ERNIE's config class declares no head_dim,
    # which the survey therefore never varied: a config that sets it goes to the meta device)
    "baidu/ERNIE-4.5-21B-A3B-PT": {
        "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"], "hidden_act": "silu",
        "hidden_size": 2560, "intermediate_size": 12288, "max_position_embeddings": 131072,
        "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_end_index": 27, "moe_layer_interval": 1,
        "moe_layer_start_index": 1, "moe_num_experts": 64, "moe_num_shared_experts": 2, "num_attention_heads": 20,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "tie_word_embeddings": True, "use_bias": False, "vocab_size": 103424,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
    # the sizes of the checkpoint's config.json as a public write-up quotes it; attn_config and ffn_config as DBRX
    # nests them
    "databricks/dbrx-instruct": {
        "model_type": "dbrx", "architectures": ["DbrxForCausalLM"], "d_model": 6144, "n_heads": 48, "n_layers": 40,
        "max_seq_len": 32768, "vocab_size": 100352, "tie_word_embeddings": False,
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_jitter_eps": 0, "moe_num_experts": 16, "moe_top_k": 4}},
    # the sizes transformers' config classes document as these checkpoints' (their defaults); MiMo's sliding layers
    # hold twice the kv heads of its full ones, DeepSeek-V4's compressed layers a compressor the others lack
    "XiaomiMiMo/MiMo-V2-Flash": {
        "model_type": "mimo_v2_flash", "vocab_size": 152576, "hidden_size": 4096, "intermediate_size": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192,
        "v_head_dim": 128, "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "sliding_window": 129, "tie_word_embeddings": False},
    "deepseek-ai/DeepSeek-V4-Flash-Base": {
        "model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048,
        "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
        "q_lora_rank": 1024, "num_experts_per_tok": 6, "n_routed_experts": 256, "n_shared_experts": 1,
        "o_groups": 8, "o_lora_rank": 1024, "index_n_heads": 64, "index_head_dim": 128, "hc_mult": 4,
        "tie_word_embeddings": False},
    # camembert-base's lm_head is tied, and its tied weight's first name is the head's (lm_head.decoder.weight);
    # electra-small projects its 128-wide embeddings to 256
    "almanach/camembert-base": {
        "model_type": "camembert", "vocab_size": 32005, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514, "type_vocab_size": 1,
        "hidden_act": "gelu", "layer_norm_eps": 1e-05, "is_decoder": True},
    "google/electra-small-discriminator": {
        "model_type": "electra", "vocab_size": 30522, "embedding_size": 128, "hidden_size": 256,
        "num_hidden_layers": 12, "num_attention_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 512,
        "type_vocab_size": 2, "hidden_act": "gelu", "is_decoder": True},
    # its block_types repeat over the 26 layers: 18 recurrent, 8 attention
    "google/recurrentgemma-2b": {
        "model_type": "recurrent_gemma", "hidden_size": 2560, "intermediate_size": 15360, "num_hidden_layers": 26,
        "num_attention_heads": 10, "num_key_value_heads": 1, "vocab_size": 256000, "lru_width": 2560,
        "conv1d_width": 4, "attention_window_size": 2048, "block_types": ["recurrent", "recurrent", "attention"],
        "hidden_activation": "gelu_pytorch_tanh", "logits_soft_cap": 30.0, "tie_word_embeddings": True},
}


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("checkpoint", sorted(PUBLISHED))
def test_a_published_config_counts_as_the_meta_device_builds_it(checkpoint):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = PUBLISHED[checkpoint]
    arch = from_config(dict(raw), "published")
    counts, lay = count_params(arch), layout(arch)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw))
    owners = {}
    for name, p in model.named_parameters():
        owners[name.rsplit(".", 1)[0]] = owners.get(name.rsplit(".", 1)[0], 0) + p.numel()
    assert counts.method == "template"
    assert (counts.total, counts.largest_module, lay.embedding) == (
        sum(owners.values()), max(owners.values()), model.get_input_embeddings().weight.numel())


def test_published_hybrids_count_to_the_sizes_their_makers_state():
    """AI21 states 52B parameters with 12B active for Jamba 1.5 Mini, Liquid AI 8.3B with 1.5B active for
    LFM2-8B-A1B (18 conv layers by its layer_types, not the 16 of a conv-conv-attention cycle); the LFM2-350M
    checkpoint's declared FFN width 6656 is 4608 as trained (2/3 of it, rounded up to a multiple of 256: a public
    loader's test says so)."""
    jamba = count_params(from_config(dict(PUBLISHED["ai21labs/AI21-Jamba-1.5-Mini"]), "t"))
    assert jamba.method == "template"
    assert round(jamba.total / 1e9) == 52 and round(jamba.active / 1e9) == 12
    lfm2_moe = count_params(from_config(dict(PUBLISHED["LiquidAI/LFM2-8B-A1B"]), "t"))
    assert lfm2_moe.method == "template"
    assert round(lfm2_moe.total / 1e8) == 83 and int(lfm2_moe.active / 1e8) == 15  # 1.56B: "1.5B"
    tpl, values = shape_templates.variables(dict(PUBLISHED["LiquidAI/LFM2-350M"]))
    ffn = [numel for pattern, _, numel in shape_templates.tensors(tpl, values) if ".feed_forward." in pattern]
    widths = {numel // 1024 for numel in ffn}
    assert widths == {4608}


def test_published_moe_models_count_to_the_sizes_their_makers_state():
    """Baidu states 21B parameters with 3B active for ERNIE-4.5-21B-A3B; Databricks 132B with 36B active for DBRX.
    ERNIE's end index -1 (the last layer, as its config class derives it) counts as the explicit 27."""
    ernie = count_params(from_config(dict(PUBLISHED["baidu/ERNIE-4.5-21B-A3B-PT"]), "t"))
    dbrx = count_params(from_config(dict(PUBLISHED["databricks/dbrx-instruct"]), "t"))
    assert ernie.method == dbrx.method == "template"
    assert round(ernie.total / 1e9) == 22 and round(ernie.active / 1e9) == 3  # 21.8B: "21B"
    assert round(dbrx.total / 1e9) == 132 and round(dbrx.active / 1e9) == 36
    to_the_last = count_params(from_config({**PUBLISHED["baidu/ERNIE-4.5-21B-A3B-PT"], "moe_layer_end_index": -1}, "t"))
    assert (to_the_last.method, to_the_last.total, to_the_last.active) == ("template", ernie.total, ernie.active)


def test_llama_4_counts_to_the_sizes_meta_states():
    """Meta states 17B active parameters for both, 400B in all for Maverick and 109B for Scout. Maverick's text model
    counts 400.7B; Scout's 107.8B, to which its vision encoder and projector add 0.46B (transformers' Llama4Config,
    built on the meta device). Both counted from moe_layers' template, which once ignored the list (2,155,104 for a
    model of 1,924,128) and was then left to the meta device."""
    scout = count_params(from_config(dict(PUBLISHED["meta-llama/Llama-4-Scout-17B-16E"]), "t"))
    maverick = count_params(from_config(dict(PUBLISHED["meta-llama/Llama-4-Maverick-17B-128E"]), "t"))
    assert scout.method == maverick.method == "template"
    assert int(maverick.total / 1e9) == 400 and round(maverick.active / 1e9) == 17
    assert round(scout.total / 1e8) == 1078 and round(scout.active / 1e9) == 17


def test_published_models_whose_layers_differ_by_position_count_to_their_stated_sizes():
    """Xiaomi states 309B parameters with 15B active for MiMo-V2-Flash, DeepSeek 284B with 13B active for
    DeepSeek-V4-Flash. Their layers' tensors differ in shape by the layer's kind or position (MiMo's k_proj is twice as
    wide in its 39 sliding layers as in its 9 full ones: 0 and every sixth from 5), which the survey once could not
    express."""
    mimo = count_params(from_config(dict(PUBLISHED["XiaomiMiMo/MiMo-V2-Flash"]), "t"))
    v4 = count_params(from_config(dict(PUBLISHED["deepseek-ai/DeepSeek-V4-Flash-Base"]), "t"))
    assert mimo.method == v4.method == "template"
    assert round(mimo.total / 1e9) == 309 and round(mimo.active / 1e9) == 15
    assert round(v4.total / 1e9) == 284 and int(v4.active / 1e9) == 13  # 13.8B: "13B"
    tpl, values = shape_templates.variables(dict(PUBLISHED["XiaomiMiMo/MiMo-V2-Flash"]))
    k_proj = {numel: instances for pattern, instances, numel in shape_templates.tensors(tpl, values)
              if pattern.endswith("k_proj.weight") and instances}
    assert k_proj == {4096 * 4 * 192: 9, 4096 * 8 * 192: 39}


def test_a_layer_kind_list_repeated_over_the_layers_counts_each_kind():
    """RecurrentGemma-2B has 2B non-embedding parameters (its paper's abstract, quoted by transformers' docs) and
    2.7B in all; its three block_types repeat over the layers, so a 27th layer is one more attention block (the
    pattern's third kind), whose tensors the recurrent layers lack."""
    raw = PUBLISHED["google/recurrentgemma-2b"]
    two_b = count_params(from_config(dict(raw), "t"))
    assert two_b.method == "template"
    assert round((two_b.total - two_b.embedding) / 1e9) == 2 and round(two_b.total / 1e8) == 27
    tpl, values = shape_templates.variables({**raw, "num_hidden_layers": 27})
    found = shape_templates.tensors(tpl, values)
    attention = [n for p, n, _ in found if p.endswith("temporal_block.q_proj.weight")]
    recurrent = [n for p, n, _ in found if p.endswith("temporal_block.linear_x.weight")]
    assert attention == [9] and recurrent == [18]


def test_an_older_field_is_read_as_its_config_class_reads_it():
    """LFM2's config class takes block_ff_dim over intermediate_size (kwargs.pop("block_ff_dim", ...)); a field no
    code of the model reads (conv_dim) holds nothing; one the model's code reads that the survey never varied
    (head_dim: getattr(config, "head_dim", ...)) sends the config to the meta device."""
    lfm2 = PUBLISHED["LiquidAI/LFM2-350M"]
    wider = count_params(from_config({**lfm2, "block_ff_dim": 9728}, "t"))  # 2/3 of it: 6485 -> 6656
    assert wider.method == "template"
    per_unit = 16 * 3 * 1024  # w1, w3 and w2 of every layer, per unit of FFN width
    assert wider.total - count_params(from_config(dict(lfm2), "t")).total == (6656 - 4608) * per_unit
    assert shape_templates.variables({**lfm2, "conv_dim": 4096}) is not None
    assert shape_templates.variables({**lfm2, "head_dim": 32}) is None


def test_a_tensor_two_switches_add_together_takes_the_configs_sizes():
    """LFM2's conv_bias adds a bias to each conv layer's in_proj (3h), its conv (h) and out_proj (h): 5 x 1024 in
    each of LFM2-350M's 10 conv layers (modeling_lfm2's Lfm2ShortConv). Only a build with conv_bias on and a conv
    layer holds them; the survey once saw them in one such build alone, at its hidden size 64, and counted 320."""
    lfm2 = PUBLISHED["LiquidAI/LFM2-350M"]
    assert lfm2["layer_types"].count("conv") == 10
    with_bias = count_params(from_config({**lfm2, "conv_bias": True}, "t"))
    assert with_bias.method == "template"
    assert with_bias.total - count_params(from_config(dict(lfm2), "t")).total == 10 * 5 * 1024


def kinds_moved(raw: dict):
    """(list key, config) for each list of layer kinds in a config with its first, then its middle entry made another
    of the list's kinds."""
    flat = shape_templates.flatten(raw)
    for key, items in sorted(flat.items()):
        kinds = sorted({x for x in items if isinstance(x, str)}) if isinstance(items, list) else []
        if len(kinds) < 2 or shape_templates.HARMLESS.search(key):
            continue
        for i in (0, len(items) // 2):
            moved = list(items)
            moved[i] = next(k for k in kinds if k != items[i])
            out = json.loads(json.dumps(raw))
            *parents, last = key.split(".")
            target = out
            for part in parents:
                target = target[part]
            target[last] = moved
            yield f"{key}[{i}]", out


KIND_COUNTED = ("qwen3_5_text", "lfm2", "lfm2_moe", "lfm3", "mimo_v2_flash", "minimax", "qwen4_exp_text")  # kept
# with their kinds counted: a moved kind must not send them to the meta device


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("model_type", [t for t in KEPT if any(kinds_moved(SURVEY["model_types"][t]["held_out"][0][
    "config"]))])
def test_a_layer_kind_list_other_than_the_one_transformers_derives_counts_as_the_meta_device_builds_it(model_type):
    """A config.json's layer_types (or mlp_layer_types, ...) need not follow the pattern transformers derives: each
    layer is built as its entry says. The template counts that list's kinds, or leaves the config to the meta device;
    it never counts the derived pattern's (15 landed templates did: Qwen3.5 with a first layer of full attention counted
    8,438,960 parameters, the model has 6,860,800)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    applied = 0
    for name, raw in kinds_moved(SURVEY["model_types"][model_type]["held_out"][0]["config"]):
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.loads(json.dumps(raw))))
        except Exception:  # noqa: BLE001 - a list transformers' validators refuse is no config
            continue
        counts = count_params(from_config(raw, "moved"))
        if counts.method == "template":
            applied += 1
            assert counts.total == sum(p.numel() for p in model.parameters()), name
    assert applied or model_type not in KIND_COUNTED


def lists_left_out(model_type: str):
    """A kept family's second survey base with every per-layer list of kinds left out, for transformers to derive;
    None where it has none."""
    raw = SURVEY["model_types"][model_type]["held_out"][0]["config"]
    lists = [k for k, v in raw.items() if isinstance(v, list) and v and all(isinstance(x, str) for x in v)]
    return {k: v for k, v in raw.items() if k not in lists} if lists else None


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("model_type", [t for t in KEPT if lists_left_out(t)])
def test_a_config_that_leaves_its_layer_kinds_out_counts_as_transformers_derives_them(model_type):
    """What transformers derives for a list a config leaves out is a formula of the template's too, fitted on the
    survey's builds. Two landed ones were wrong at the second base's 6 layers: lara_mini's layer_types (a config of
    only its sizes counted 706,704 parameters, the model has 3,124,848) and hy_v4's indexer_types (56,554,213 for
    59,714,021: its indexers are in layer 0 and every fourth from 1, and the template's (layers + 2) // 3 - layers //
    16 holds at 4, 8 and 10 layers, not at 6). The survey now checks every build as a config of only the keys
    it set, and both go to the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = lists_left_out(model_type)
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.loads(json.dumps(raw))))
    except Exception:  # noqa: BLE001 - transformers cannot build it without the list (lfm2_moe): not counted either
        with pytest.raises(ConfigError, match="is not a causal LM that transformers can build here"):
            from_config(raw, "left out")
        return
    assert count_params(from_config(raw, "left out")).total == sum(p.numel() for p in model.parameters())


def module_sizes(lay) -> list:
    """Each module's tensor sizes, the modules in one order: what the largest module and ZeRO-3's persistence read."""
    return sorted(tuple(sorted(m)) for m in lay.modules)


@pytest.mark.slow  # builds on the meta device: make test only
def test_moe_layers_listed_count_as_listed_not_as_the_interleave_step_derives_them():
    """Llama 4's text model puts an MoE block in the layers moe_layers lists; left out, transformers derives them from
    interleave_moe_layer_step. Its template once read only the step: this config with five of its six layers
    listed counted six MoE layers (2,155,104 parameters; the model, with a dense MLP in the sixth, has 1,924,128).
    Its template now counts the layers the list names (`moe_layers#in`: each index below the layer count, once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = {"model_type": "llama4_text", "vocab_size": 352, "hidden_size": 96, "intermediate_size": 160,
           "intermediate_size_mlp": 320, "num_hidden_layers": 6, "num_attention_heads": 12, "num_key_value_heads": 4,
           "head_dim": 8, "num_local_experts": 6, "num_experts_per_tok": 1, "moe_layers": [0, 1, 2, 3, 4, 5]}
    listed = raw["moe_layers"]
    for moe_layers in (listed[:-1], listed[1:], listed[:1]):
        config = {**raw, "moe_layers": moe_layers}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.loads(json.dumps(config))))
        counts = count_params(from_config(config, "listed"))
        assert counts.method == "template"
        assert counts.total == sum(p.numel() for p in model.parameters()), moe_layers


FLINT = {  # the survey's second base for flint
    "model_type": "flint", "vocab_size": 352, "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 6,
    "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 8, "num_experts": 6, "num_experts_per_tok": 3,
    "moe_intermediate_size": 48, "shared_expert_intermediate_size": 56, "tie_word_embeddings": False,
    "layer_types": ["full_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                    "full_attention"], "sliding_window": 513}


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("step,mlp_only_layers", [(1, [0, 0]), (1, [1, 0]), (1, [5, 4, 1]), (1, [0, 99]), (1, []),
                                                  (2, [1]), (2, [0]), (3, [2, 5])])
def test_a_list_of_layer_indices_counts_the_layers_it_names(step, mlp_only_layers):
    """flint's layers listed in mlp_only_layers get a dense MLP in place of the MoE block, which is in every
    decoder_sparse_step-th layer: the same index twice names one layer, an index past the last names none, and which
    layers a list names decides the count where the step is not 1. A template of the survey's once counted the
    layers less the list's count, over the step: [1] with a step of 2 counted 3 MoE layers of 6 where the model has 2
    (layers 3 and 5). The survey now also holds out each index list moved one layer on, with every change, which
    that template failed; flint is counted on the meta device."""
    from trl_ds.plan.params import meta_layout

    raw = {**FLINT, "mlp_only_layers": mlp_only_layers, "decoder_sparse_step": step}
    arch = from_config(dict(raw), "listed")
    assert module_sizes(layout(arch)) == module_sizes(meta_layout(arch.config_json))
    assert "flint" not in KEPT  # no formula of the survey's counts which layers a list names


WIDE = {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2}
SWITCHING_SIZES = [  # a size whose 0 (or 1) means no module, set wide: (change, the largest module's parameters by
    # hand)
    ({"model_type": "granitemoeshared", **WIDE, "shared_intermediate_size": 8192}, 2 * 8192 * 1024),  # input_linear
    ({"model_type": "granitemoe_swa", **WIDE, "shared_intermediate_size": 8192}, 2 * 8192 * 1024),
    ({"model_type": "cohere2_moe", **WIDE, "num_shared_experts": 3, "intermediate_size": 4096},
     6 * 3 * 4096 * 1024),  # its 6 routed experts, intermediate_size wide, stay the largest: the modules tell
    ({"model_type": "xlm", "n_langs": 4096, "use_lang_emb": True}, 4096 * 96),  # XLM-100's lang_embeddings
]


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,largest", SWITCHING_SIZES, ids=[c["model_type"] for c, _ in SWITCHING_SIZES])
def test_a_size_that_switches_a_module_on_counts_its_width_not_a_number_of_modules(change, largest):
    """granitemoeshared's shared MLP is there where shared_intermediate_size is not 0, that wide. The survey built it at
    0 and 1 only, took the size for a switch, and its template counted shared_intermediate_size modules per layer of
    width 1: the total agreed, the modules did not (8192 wide: 32,787 modules with the largest 1,048,576 parameters;
    the model has 23, the largest 16,777,216). cohere2_moe's shared experts are one MLP num_shared_experts times as
    wide, not that many MLPs; xlm's language embeddings are one table n_langs wide, not n_langs / 2 tables of 2."""
    from trl_ds.plan.params import meta_layout

    raw = {**SURVEY["model_types"][change["model_type"]]["held_out"][0]["config"], **change}
    arch = from_config(dict(raw), "switched")
    counts, lay = count_params(arch), layout(arch)
    meta = meta_layout(arch.config_json)
    assert counts.method == "template"
    assert module_sizes(lay) == module_sizes(meta)
    assert counts.largest_module == max(map(sum, meta.modules)) == largest


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("q_lora_rank", [None, 24, 0])
def test_a_key_left_none_switches_its_tensors_and_set_takes_its_size(q_lora_rank):
    """Kimi Linear's attention layers project the query through q_proj where q_lora_rank is None, else through a
    q_lora_rank-wide low-rank pair (q_a_proj, its norm, q_b_proj); 0 builds that pair with no width. The survey held
    q_lora_rank at None before (a config setting it went to the meta device) and could not count the type at all."""
    from trl_ds.plan.params import meta_layout

    raw = {**SURVEY["model_types"]["kimi_linear"]["held_out"][0]["config"], "q_lora_rank": q_lora_rank}
    arch = from_config(dict(raw), "low rank")
    counts, lay = count_params(arch), layout(arch)
    meta = meta_layout(arch.config_json)
    assert counts.method == "template"
    assert (module_sizes(lay), lay.embedding, lay.lm_head) == (module_sizes(meta), meta.embedding, meta.lm_head)


NEMOTRON_H = {"model_type": "nemotron_h", "vocab_size": 320, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "mamba_num_heads": 4,
              "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 16, "moe_intermediate_size": 32,
              "n_routed_experts": 4, "num_experts_per_tok": 2}
DERIVED_LAYERS = [  # (config.json, the layers transformers builds, counted by template)
    ({**NEMOTRON_H, "hybrid_override_pattern": "M-M*-E"}, 6, True),  # a hub config.json's form: a character a layer
    ({**NEMOTRON_H, "hybrid_override_pattern": "M-M*-E", "num_hidden_layers": 6}, 6, True),  # beside it, agreeing
    ({**NEMOTRON_H, "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp", "mlp"]}, 5, True),
    ({**NEMOTRON_H, "hybrid_override_pattern": "M-M*-E", "num_hidden_layers": 52}, 6, False),  # transformers warns
    ({**NEMOTRON_H, "layers_block_type": ["mamba", "attention", "mlp"]}, 3, False),  # older kind names
    ({"model_type": "prophetnet", "vocab_size": 320, "hidden_size": 64, "num_encoder_layers": 3,
      "num_decoder_layers": 2, "num_encoder_attention_heads": 4, "num_decoder_attention_heads": 4,
      "encoder_ffn_dim": 96, "decoder_ffn_dim": 80}, 3, True),
]


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("raw,layers,templated", DERIVED_LAYERS)
def test_a_layer_count_the_config_class_derives_is_read_as_transformers_reads_it(raw, layers, templated):
    """nemotron_h's num_hidden_layers is the length of layers_block_type, which a hub config.json gives as
    hybrid_override_pattern (M mamba, - MLP, * attention, E MoE); prophetnet's is num_encoder_layers. Neither is a key
    the class keeps, and the planner once refused both templates' own builds. The first template the survey kept for
    nemotron_h counted its MLPs and MoE blocks once per attention layer: every probe had kept the four kinds' counts
    in step."""
    from transformers import AutoConfig

    from trl_ds.plan.params import meta_layout

    arch = from_config(dict(raw), "derived")
    counts, lay = count_params(arch), layout(arch)
    meta = meta_layout(arch.config_json)
    assert (counts.method == "template") == templated
    assert arch.num_hidden_layers == AutoConfig.for_model(**raw).num_hidden_layers == layers
    assert (module_sizes(lay), lay.embedding, lay.lm_head) == (module_sizes(meta), meta.embedding, meta.lm_head)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("widths,templated", [(16384, True), ([16384] * 35, True), ([8192] * 35, True),
                                              ([16384] * 34 + [8192], False)])
def test_a_width_given_once_per_layer_counts_where_every_layer_has_it(widths, templated):
    """gemma3n's intermediate_size is one width, or a list of one per layer (its class turns the first into the
    second, and writes the list). A list of one width counts by template; widths that differ by layer go to the meta
    device. Before, the list's widths were counted as kinds (how many layers are 16384 wide), and no formula fitted."""
    from trl_ds.plan.params import meta_layout

    arch = from_config({"model_type": "gemma3n_text", "intermediate_size": widths}, "widths")
    counts, lay = count_params(arch), layout(arch)
    meta = meta_layout(arch.config_json)
    assert (counts.method == "template") == templated
    assert (module_sizes(lay), lay.embedding, lay.lm_head) == (module_sizes(meta), meta.embedding, meta.lm_head)


def test_a_per_layer_pattern_string_reads_as_the_config_class_converts_it():
    tpl = TEMPLATES["types"]["nemotron_h"]
    assert shape_templates.with_aliases({"hybrid_override_pattern": "M-*E"}, tpl) == {
        "layers_block_type": ["linear_attention", "mlp", "full_attention", "moe"]}
    given = {"hybrid_override_pattern": "M-", "layer_types": ["mlp"]}  # the list wins: the class ignores the string
    assert shape_templates.with_aliases(given, tpl) == given
    assert shape_templates.with_aliases({"mamba_n_groups": 4}, tpl) == {"n_groups": 4}  # pop(..) if .. in kwargs


def test_a_config_class_that_rewrites_its_keys_when_it_saves_them_is_left_to_the_meta_device():
    """dory writes its layer counts doubled (attention and MLP as separate blocks) and halves them when it reads its
    own form back, not a config of only the keys a user sets. A template fitted to the written form counted such a
    config at half its layers (107,712 parameters for a model of 174,144), so the survey checks both forms."""
    assert "dory" not in KEPT
    assert SURVEY["model_types"]["dory"]["why"].startswith("a build it learned from (base) as its keys alone counts "
                                                           "{'total': 107712")


@pytest.mark.parametrize("flat,name,expected", [
    ({"q_lora_rank": None}, "q_lora_rank#set", 0),  # said None
    ({"q_lora_rank": 1536}, "q_lora_rank#set", 1),
    ({}, "q_lora_rank#set", None),  # left out: the class default decides
    ({"shared_intermediate_size": 0}, "shared_intermediate_size#nz", 0),
    ({"shared_intermediate_size": 1024}, "shared_intermediate_size#nz", 1),
    ({}, "shared_intermediate_size#nz", None),
])
def test_a_none_or_zero_switch_reads_as_worked_by_hand(flat, name, expected):
    assert shape_templates.given(flat, name, {}) == expected


def test_a_setting_the_survey_held_fixed_or_an_unseen_key_the_model_reads_goes_to_the_meta_device():
    phi = PUBLISHED["microsoft/phi-2"]
    assert shape_templates.variables(dict(phi)) is not None
    assert shape_templates.variables({**phi, "head_dim": 64}) is None  # phi's attention reads it if set
    assert shape_templates.variables({**phi, "a_key_no_code_reads": 3}) is not None
    assert shape_templates.variables({**phi, "sliding_window": 4096}) is None  # shared code reads it
    assert shape_templates.variables({**phi, "sliding_window": None}) is not None
    assert TEMPLATES["types"]["mpt"]["fixed"]["norm_type"] == "low_precision_layernorm"  # a string: no formula
    mpt = SURVEY["model_types"]["mpt"]["held_out"][0]["config"]
    assert shape_templates.variables(dict(mpt)) is not None
    assert shape_templates.variables({**mpt, "norm_type": "rmsnorm"}) is None


def test_a_size_a_config_may_leave_none_takes_what_transformers_puts_in_its_place():
    """gptj's, codegen's and gpt_bigcode's n_inner: None is 4 * n_embd; set, it is the MLP's width (starcoderbase-1b
    sets it, and counts as the meta device builds it: the published-config test)."""
    gptj = dict(SURVEY["model_types"]["gptj"]["held_out"][0]["config"])
    assert gptj.get("n_inner") is None
    n_embd = gptj["n_embd"]
    _, values = shape_templates.variables(gptj)
    assert values["n_inner"] == 4 * n_embd
    _, values = shape_templates.variables({**gptj, "n_inner": 3 * n_embd})
    assert values["n_inner"] == 3 * n_embd
    set_wide = count_params(from_config({**gptj, "n_inner": 3 * n_embd}, "t"))
    left_none = count_params(from_config(gptj, "t"))
    mlp_in_and_out = 2 * n_embd + 1  # fc_in weight and bias, fc_out weight, per unit of width
    assert left_none.total - set_wide.total == gptj["n_layer"] * n_embd * mlp_in_and_out


@pytest.mark.slow  # fresh interpreters: make test only
@pytest.mark.parametrize("checkpoint", ["microsoft/phi-2", "CohereForAI/c4ai-command-r-v01", "bigscience/bloom-560m",
                                        "bigcode/starcoderbase-1b"])  # Jamba and LFM2: the bench (make test's time)
def test_planning_a_templated_family_takes_under_a_second_without_torch(tmp_path, checkpoint):
    """Under a second of wall on an idle machine (scripts/bench_plan_count.py). Here, on a shared machine: within 3x
    the CPU time of a preset's plan (the same imports, no count to make) measured beside it."""
    folder = tmp_path / checkpoint.split("/")[1]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PUBLISHED[checkpoint]))

    def templated(plan):
        assert plan["architecture"]["count"] == "template"
    assert_planned_without_torch_within_3x_a_preset(f"model.name_or_path={folder}", templated)


@pytest.mark.parametrize("term,values,expected", [
    (["pd", "e", "h", "n"], {"e": 2, "h": 4096, "n": 128}, 64),  # mamba's head_dim: expand * hidden // heads
    (["pd", "e", "h", "n"], {"e": 3, "h": 10, "n": 4}, 7),  # 30 // 4, not 3 * (10 // 4) = 6
    (["k", "L", "p", "o"], {"L": 32, "p": 8, "o": 4}, 4),  # jamba-v0.1's attention layers: 4, 12, 20, 28
    (["k", "L", "p", "o"], {"L": 5, "p": 8, "o": 4}, 1),  # layer 4 only
    (["k", "L", "p", "o"], {"L": 4, "p": 8, "o": 4}, 0),  # layers 0-3: none
    (["k", "L", "p", "o"], {"L": 2, "p": 8, "o": 4}, 0),  # not -1
    (["x", "bias", ["p", "L"]], {"bias": 0, "L": 32}, 0),
    (["x", "q#set", ["p", "q", "h"]], {"q#set": 0, "h": 64}, 0),  # off: q, left None, is never read
    (["x", "bias", ["k", "L", "p", "o"]], {"bias": 1, "L": 32, "p": 2, "o": 1}, 16),  # odd layers of 32
    (["u", "f", "m", 2, 3], {"f": 16384, "m": 256}, 11008),  # LLaMA-7B's FFN: 2/3 of 4 x 4096, to 256s
    (["u", "f", "m", 2, 3], {"f": 6656, "m": 256}, 4608),  # LFM2-350M: 4437 up to 4608
    (["u", "f", "m", 2, 3], {"f": 12288, "m": 256}, 8192),  # LFM2-1.2B: exact, not raised
    (["u", "f", "m", 1, 1], {"f": 1000, "m": 256}, 1024),
    (["w", "L", "s", "e", "k"], {"L": 28, "s": 1, "e": 27, "k": 1}, 27),  # ERNIE-4.5-21B-A3B: every layer but 0
    (["w", "L", "s", "e", "k"], {"L": 28, "s": 1, "e": -1, "k": 1}, 27),  # -1: to the last layer
    (["w", "L", "s", "e", "k"], {"L": 12, "s": 2, "e": 9, "k": 2}, 4),  # layers 3, 5, 7, 9
    (["w", "L", "s", "e", "k"], {"L": 12, "s": 2, "e": 40, "k": 3}, 4),  # 2, 5, 8, 11: an end past the last layer
    (["w", "L", "s", "e", "k"], {"L": 4, "s": 6, "e": -1, "k": 1}, 0),  # a start past the last: none, not -2
])
def test_the_terms_the_hybrid_families_need_count_as_worked_by_hand(term, values, expected):
    assert shape_templates.term_value(term, values) == expected


@pytest.mark.parametrize("items,item,layers,expected", [
    (["recurrent", "recurrent", "attention"], '"attention"%', 26, 8),  # layers 2, 5, ..., 23
    (["recurrent", "recurrent", "attention"], '"recurrent"%', 26, 18),
    (["recurrent", "recurrent", "attention"], '"attention"%', 2, 0),  # fewer layers than the pattern
    (["a", "b"], '"b"%', 2, 1),  # as long as the layers: its own count
    (["a", "b"], '"b"%', None, None),  # no layer count to repeat it over: unknown, not 0
    ([0, 1, 5, 5, 9], "in", 6, 3),  # layers 0, 1 and 5, once each; 9 is past the last
    ([], "in", 4, 0),
    ([True, 1], "in", 4, 1),  # a boolean names no layer
    ([1, 2], "in", None, None),
])
def test_a_kind_list_repeated_over_the_layers_counts_as_worked_by_hand(items, item, layers, expected):
    assert shape_templates.list_variable(items, item, layers) == expected
