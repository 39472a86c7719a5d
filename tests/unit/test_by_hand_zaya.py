"""ZAYA1 is counted from its config without torch (trl_ds/plan/by_hand/zaya.py), exactly as the meta device builds
it: its CCA attention's convolutions run over (heads + kv heads) x head_dim channels, its value projection is two
floored halves, and its router is an MLP whose first layer alone has no router_states_scale, which no shape template
expresses; it went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "num_experts": 3, "moe_intermediate_size": 16,
         "router_hidden_size": 12}
AS_RELEASED = {  # ZAYA1-8B's config.json keys, at SMALL's sizes: nested RoPE with a stray rope_type
    **SMALL, "layer_types": ["hybrid"] * 2, "partial_rotary_factor": 0.5, "architectures": ["ZayaForCausalLM"],
    "rope_parameters": {"hybrid": {"partial_rotary_factor": 0.5, "rope_theta": 5000000, "rope_type": "default"},
                        "hybrid_sliding": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0,
                                           "rope_type": "default"},
                        "rope_type": "default"}}
VARIANTS = {
    "defaults": {},  # 40 layers, 8.84B: no SMALL
    "small": SMALL,
    "yarn RoPE": {**SMALL, "rope_parameters": {"hybrid": {"rope_type": "yarn", "rope_theta": 5e6, "factor": 4.0,
                                                      "original_max_position_embeddings": 4096}}},
    "small, as released": AS_RELEASED,
    "untied, lm_head and attention biases": {**SMALL, "tie_word_embeddings": False, "lm_head_bias": True,
                                             "attention_bias": True},
    "odd head_dim, one kv head, wider kernels": {**SMALL, "head_dim": 7, "num_key_value_heads": 1, "cca_time0": 3,
                                                 "cca_time1": 4},
    "sliding layers, own RoPE": {**SMALL, "num_hidden_layers": 3, "sliding_window": 16,
                                 "layer_types": ["hybrid_sliding", "hybrid", "hybrid_sliding"],
                                 "rope_parameters": {"hybrid": {"rope_theta": 10000.0},
                                                     "hybrid_sliding": None}},
    "one layer, no padding index": {**SMALL, "num_hidden_layers": 1, "pad_token_id": None, "num_experts": 1},
}


def test_a_small_config_counts_as_worked_by_hand():
    """SMALL: h 32, 4 heads and 2 kv heads of 8, 3 experts of 16, router width 12, CCA kernels 2. Attention: o and
    q 2 x 1024, k 512, the value halves 2 x 256; the convolutions over (4 + 2) x 8 = 48 channels, depthwise
    48 x 2 + 48 = 144 and grouped (a head of 8 per group) 48 x 8 x 2 + 48 = 816; the key temperature 2 (4,034). The
    router: down_proj 32 x 12 + 12 = 396, its MLP's norm 12, fc1 and fc2 2 x 156, out_proj 12 x (3 + 1) = 48 (768),
    and from the second layer on its router_states_scale 12. Experts 3 x (2 x 16 x 32 + 32 x 16) = 4,608. Two norms and
    two residual scalings of four vectors: 10 x 32 = 320. Layer 0: 9,730, layer 1: 9,742. The tied embedding 3,200,
    the final norm 32 and the input's scale and bias 64. One of three experts per token: 2 x 3,072 idle."""
    counts = count_params(from_config({"model_type": "zaya", **SMALL}, "by hand"))
    assert (counts.method, counts.total, counts.active, counts.largest_module) == (
        "fast", 3200 + 32 + 64 + 9730 + 9742, 3200 + 32 + 64 + 9730 + 9742 - 2 * 3072, 4608)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "zaya", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_tied_lm_head_with_a_bias_is_left_to_the_meta_device_and_counted_exactly():
    """Tied, the lm_head keeps its bias (vocab) while its weight is the embedding: the by-hand interface reads the
    untied head's size from the lm_head module's first tensor, which would take the bias for a head, so settings()
    declines it and the meta device counts it."""
    _, meta = assert_declined({"model_type": "zaya", **SMALL, "lm_head_bias": True})
    assert meta.lm_head == 0


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"num_experts_per_tok": 2}, CLASS_REFUSES + "'validate_architecture'"),
    ({"layer_types": ["hybrid", "hybrid_sliding"]}, CLASS_REFUSES + "'validate_architecture'"),  # no sliding_window
    ({"rope_parameters": {"hybrid_sliding": {"rope_theta": 10000.0}}}, "KeyError: 'hybrid'"),
    ({"rms_norm_eps": 1}, "StrictDataclassFieldValidationError: Validation error for field 'rms_norm_eps'"),
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "zaya", **SMALL, **change}, said)
