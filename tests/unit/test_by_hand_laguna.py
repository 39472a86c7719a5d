"""Laguna is counted from its config without torch (trl_ds/plan/by_hand/laguna.py), exactly as the meta device
builds it: each layer takes its head count from num_attention_heads_per_layer and its MLP from mlp_layer_types (both
derived where a config leaves them out), and the output gate g_proj is one value per head or per channel as `gating`
says; no shape template expresses per-layer lists, and laguna went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4,
         "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24}
VARIANTS = {
    "defaults": {},  # 40 layers of 256 experts: no SMALL
    "small": SMALL,  # lists left out: 4 heads everywhere, the first layer dense
    "heads per layer, per-element gate": {**SMALL, "num_attention_heads_per_layer": [4, 8, 2],
                                          "gating": "per-element"},
    "gating False is per channel, tied": {**SMALL, "gating": False, "tie_word_embeddings": True},
    "own MLP and layer kinds, RoPE given": {
        **SMALL, "mlp_layer_types": ["sparse", "dense", "sparse"], "gating": "per-head",
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 50000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0,
                                                  "partial_rotary_factor": 0.5}}},
    "every layer dense, biases": {**SMALL, "mlp_layer_types": ["dense"] * 3, "attention_bias": True,
                                  "num_key_value_heads": 4},
}


@pytest.mark.parametrize("gating,total", [(True, 7888 + 14036 + 10772 + 6432),
                                          ("per-element", 7888 + 14036 + 10772 + 6432 + 224 * (4 + 8 + 2))])
def test_a_small_config_counts_as_worked_by_hand(gating, total):
    """3 layers of 4, 8 and 2 heads of 8, 2 key/value heads; mlp_layer_types left out: dense, sparse, sparse. A layer
    of n heads: q and o 32 x 8n each, k and v 32 x 16 = 512 each, q_norm and k_norm 8 + 8, the two layer norms 64, and
    g_proj 32 x n with a gate per head (544n + 1,104: 3,280, 5,456, 2,192), 32 x 8n per channel (224n more). The dense
    MLP 3 x 32 x 48 = 4,608; a sparse one 4 experts' gate_up 4 x 2 x 16 x 32 = 4,096 and down 2,048, the router
    4 x 32 and its correction bias 4, and the shared expert 3 x 32 x 24 = 2,304 (8,580). So 7,888, 14,036 and 10,772;
    the embedding and the untied lm_head 3,200 each and the final norm 32 (6,432). 2 of the 4 experts are active."""
    raw = {**SMALL, "model_type": "laguna", "num_attention_heads_per_layer": [4, 8, 2], "gating": gating}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.active) == ("fast", total, total - 2 * 3072)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "laguna", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_scaled_rope_holds_no_tensor_and_counts_as_the_meta_device_builds_it():
    """Yarn on the full-attention layers: no tensor changes, and the formulas count it."""
    rope = {"full_attention": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                               "original_max_position_embeddings": 4096}}
    assert_counts_as_the_meta_device_builds_it({"model_type": "laguna", **SMALL, "rope_parameters": rope})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"num_attention_heads_per_layer": [4, 8]}, CLASS_REFUSES + "'validate_architecture'"),  # 2 listed, 3 layers
    ({"mlp_layer_types": ["dense", "moe", "sparse"]}, CLASS_REFUSES + "'validate_layer_type'"),
    ({"gating": 1}, "StrictDataclassFieldValidationError: Validation error for field 'gating'"),  # a bool or a str
    ({"moe_apply_router_weight_on_input": True}, "NotImplementedError: moe_apply_router_weight_on_input=True is not "
                                                 "yet supported"),
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "laguna", **SMALL, **change}, said)
