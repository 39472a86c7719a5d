"""Lara Mini (lara_mini) is counted from its config without torch (trl_ds/plan/by_hand/lara_mini.py), exactly as the
meta device builds it: a layer holds a gated delta net or an attention by its place in layer_types, which the class
derives where a config leaves it out (a pattern of period 5), which no shape template expresses."""
import pytest
from by_hand_checks import assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.by_hand.lara_mini import settings
from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 7, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
         "linear_key_head_dim": 8, "linear_value_head_dim": 12, "linear_conv_kernel_dim": 3, "num_experts": 4,
         "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}  # a long-context config's
VARIANTS = {
    "defaults": {},  # 34 layers, 7.28B
    "small, layer_types derived": SMALL,  # 7 layers: the pattern of 5, then its first two again
    "yarn RoPE": {**SMALL, "rope_parameters": YARN},
    "untied, biases, pad token": {**SMALL, "tie_word_embeddings": False, "attention_bias": True, "pad_token_id": 5},
    "own layer_types, legacy names": {**SMALL, "num_hidden_layers": 4,
                                      "layer_types": ["mamba", "attention", "conv", "linear_attention"]},
    "no routed experts": {**SMALL, "num_experts": 0},
    "keys the class has no field for": {**SMALL, "intermediate_size": 99, "num_local_experts": 3,
                                        "mlp_layer_types": ["sparse"] * 7},
}


def test_the_class_derives_the_pattern_of_five():
    c = settings({"model_type": "lara_mini", **SMALL})
    linear, sliding, full = "linear_attention", "sliding_attention", "full_attention"
    assert c["layer_types"] == [linear, sliding, linear, full, sliding, linear, sliding]


def test_a_small_config_counts_as_worked_by_hand():
    """Four layers, layer_types derived: linear, sliding, linear, full. Hidden 16. An attention: q 16*2*8 = 256,
    k and v 16*1*8 = 128 each, o 256, q/k norms 8 + 8 (784). A gated delta net (key dim 1*4, value dim 2*4 = 8, conv
    dim 2*4 + 8 = 16): conv 16*2 = 32, dt_bias and A_log 2 + 2, gated norm 4, out_proj 8*16 = 128, in_proj_qkv
    16*16 = 256, in_proj_z 16*8 = 128, in_proj_b and in_proj_a 16*2 = 32 each (616). Every layer's MoE block: experts
    2*(2*4*16) + 2*16*4 = 384, router 2*16 = 32, shared expert 3 x 16*8 = 384 (800), and two norms 32. The tied
    embedding 32*16 = 512 and the final norm 16. Active: one of two experts, 192 idle in each layer."""
    raw = {"model_type": "lara_mini", "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 4,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1,
           "linear_num_value_heads": 2, "linear_key_head_dim": 4, "linear_value_head_dim": 4,
           "linear_conv_kernel_dim": 2, "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 4,
           "shared_expert_intermediate_size": 8}
    counts = count_params(from_config(raw, "by hand"))
    total = 512 + 16 + 2 * (784 + 800 + 32) + 2 * (616 + 800 + 32)
    assert (counts.method, counts.total, counts.active, counts.largest_module) == ("fast", total, total - 4 * 192,
                                                                                   512)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "lara_mini", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"num_key_value_heads": 3}, "'validate_architecture'"),  # 4 heads
    ({"layer_types": ["linear_attention"] * 6}, "'validate_layer_type'"),  # 7 layers
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "lara_mini", **SMALL, **change},
                   f"StrictDataclassClassValidationError: .*{said}")


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_config_the_formulas_decline_is_still_counted_exactly():
    """prelu holds a weight in every MLP it runs in: the meta device counts it (7 layers, one each in the shared and
    the routed experts' MLPs)."""
    counts, _ = assert_declined({"model_type": "lara_mini", **SMALL, "hidden_act": "prelu"})
    assert counts.total > count_params(from_config({"model_type": "lara_mini", **SMALL}, "silu")).total
