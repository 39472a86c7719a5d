"""Ling 3's hybrid (bailing_hybrid) is counted from its config without torch (trl_ds/plan/by_hand/bailing_hybrid.py),
exactly as the meta device builds it: a layer holds MLA or KDA linear attention by its place in `layer_types`, and a
dense MLP or routed experts by its place in `mlp_layer_types`, both derived from a group size and a dense-layer count
where a config.json leaves them out; the KDA widths come from the given head_dim, which the class then overwrites
with qk_rope_head_dim. No shape template expresses that; it went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 100, "pad_token_id": 0, "eos_token_id": 1, "hidden_size": 32, "intermediate_size": 48,
         "moe_intermediate_size": 8, "num_hidden_layers": 3, "num_attention_heads": 4, "num_local_experts": 4,
         "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "kv_lora_rank": 16, "qk_rope_head_dim": 4,
         "qk_nope_head_dim": 8, "v_head_dim": 8, "head_dim": 6, "layer_group_size": 2, "first_k_dense_replace": 1}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}  # a long-context config's
VARIANTS = {
    "defaults": {},  # 42 layers of 512 experts, 124B: no SMALL
    "small": SMALL,
    "yarn RoPE": {**SMALL, "rope_parameters": YARN},
    "stored names, tie asked for": {**SMALL, "num_experts": 6, "num_experts_per_token": 3, "num_shared_experts": 2,
                                    "tie_word_embeddings": True},  # the stored names win; nothing is tied
    "q lora, biases, kv heads left to the heads": {**SMALL, "q_lora_rank": 12, "attention_bias": True,
                                                   "num_key_value_heads": None},
    "KDA sizes as written back": {**SMALL, "linear_head_dim": 10, "linear_num_heads": 2, "linear_conv_kernel_dim": 3},
    "own lists, legacy kinds": {**SMALL, "layer_types": ["attention", "mamba", "full_attention"],
                                "mlp_layer_types": ["sparse", "dense", "sparse"]},
    "uneven groups, all sparse, own RoPE": {
        **SMALL, "num_hidden_layers": 5, "layer_group_size": 3, "first_k_dense_replace": 0, "qk_rope_head_dim": 5,
        "partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default", "rope_theta": 10000}},
    "no shared experts, no padding index, all dense": {**SMALL, "num_shared_experts": 0, "pad_token_id": None,
                                                       "first_k_dense_replace": 9},
}


def test_a_small_config_counts_as_worked_by_hand():
    """SMALL: h 32, 3 layers in groups of 2 (KDA, MLA, KDA), the first dense. KDA (4 heads of 6, width 24): q, k, v,
    the forget gate's f_proj and g_proj 5 x 768, the depthwise conv over 72 channels x 4 = 288, A_log and dt_bias
    4 + 24, b_proj 128, o_norm 6, o_proj 768 (5,058). MLA (4 heads, q 8 + 4 wide, kv rank 16, v 8): q_proj
    32 x 48 = 1,536, kv_a_proj_with_mqa 32 x 20 = 640, kv_a_layernorm 16, kv_b_proj 16 x 64 = 1,024, o_proj 1,024,
    g_proj 128 (4,368). The dense MLP 3 x 32 x 48 = 4,608; the sparse one: experts 4 x (2 x 8 x 32 + 32 x 8) = 3,072,
    the router 4 x 32 = 128, one shared expert 3 x 256 = 768 (3,968). Two norms per layer 64. Layers: 9,730, 8,400,
    9,090; the embedding and the untied lm_head 2 x 3,200 and the final norm 32. Two of four experts per token: half
    of 3,072 idle in each of 2 layers."""
    counts = count_params(from_config({"model_type": "bailing_hybrid", **SMALL}, "by hand"))
    total = 2 * 3200 + 32 + 9730 + 8400 + 9090
    assert (counts.method, counts.total, counts.active, counts.largest_module) == ("fast", total, total - 3072, 3200)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "bailing_hybrid", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_scaled_rope_is_left_to_the_meta_device_and_counted_exactly():
    """A yarn without original_max_position_embeddings, which transformers fills in from the config: settings() counts
    a scaled RoPE only where the entry holds every key its kind requires, so it declines, and the meta device counts
    it."""
    assert_declined({"model_type": "bailing_hybrid", **SMALL,
                                    "rope_parameters": {"rope_type": "yarn", "factor": 2.0}})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"attention_dropout": 0}, "StrictDataclassFieldValidationError: Validation error for field "
                               "'attention_dropout'"),  # @strict: 0 is no float
    ({"mlp_layer_types": ["dense"]}, CLASS_REFUSES + "'validate_layer_type'"),
    ({"qk_rope_head_dim": 5}, CLASS_REFUSES + "'validate_rope'"),  # an odd head rotated whole
    ({"pad_token_id": 100}, "AssertionError: Padding_idx must be within num_embeddings"),
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "bailing_hybrid", **SMALL, **change}, said)
