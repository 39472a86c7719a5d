"""Inkling 2 Loop's text model is counted from its config without torch (trl_ds/plan/by_hand/inkling2_loop.py),
exactly as the meta device builds it: which tensors a layer holds depends on its position (layer 0 has no
attention-input query, the looped layers hold message gates) and on its `layer_types` entry (a full-attention layer
has its own heads, dynamic convolutions and three input norms), which no shape template expresses."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 320, "unpadded_vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "swa_num_attention_heads": 2,
         "swa_num_key_value_heads": 1, "swa_head_dim": 16, "sliding_window_size": 24, "rel_extent": 40, "d_rel": 4,
         "conv_kernel_size": 3, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
         "n_layers_per_attn_res_block": 2, "loop_layer_index_start": 2, "loop_layer_index_end": 6,
         "loop_gate_rank": 8, "eos_token_id": None}
VARIANTS = {
    "defaults": {},  # 24 layers, 6 to 17 looped
    "small": SMALL,
    "small, class's loop range past the last layer": {**SMALL, "n_layers_per_attn_res_block": 6,
                                                      "loop_layer_index_start": 6, "loop_layer_index_end": 18},
    "own layer_types, legacy and other kinds": {**SMALL, "layer_types": [
        "full_attention", "hybrid_sliding", "attention", "hybrid_sliding", "hybrid", "sliding_attention",
        "hybrid_sliding", "hybrid"]},
    "loop_config wins over the loop keys": {**SMALL, "loop_config": {"core_start": 4, "core_end": 8,
                                                                     "gate_rank": 4, "num_passes": 2}},
    "empty loop range": {**SMALL, "loop_layer_index_end": 2},
    "aliases win over their fields": {**SMALL, "intermediate_size": 24, "num_local_experts": 3,
                                      "sconv_kernel_size": 2, "sliding_window": 12},
    "tied in the config, untied in the model": {**SMALL, "unpadded_vocab_size": 320, "tie_word_embeddings": True},
}


def test_a_small_config_counts_as_worked_by_hand():
    """Hidden 8, two experts 4 wide, conv kernel 2, d_rel 2, 2 heads x 4 and 1 kv head in both kinds, layer 1 looped.
    Layer 0, sliding: q 8 x 8 = 64 and its scale 8, k and v 8 x 4 = 32 and a depthwise conv 4 x 2 = 8 each, o gate
    64 and o 64, sinks 8 x 2 = 16, bias bank linear 8 x 4 = 32, scale 4, profiles 2 x 8 (sliding_window_size) = 16:
    attention 348; mlp_input 8, experts 2 x (2 x 4 x 8) = 128 and 2 x 8 x 4 = 64, router 2 x 8 = 16, two norms 16,
    two residual convs 8 x 2 = 16 each: 612 (no attention_input in layer 0).
    Layer 1, full: q 64 + 8, k and v 32 + static taps 2 x 4 = 8 + tap projection 8 x 2 = 16 each, o 128, sinks 16,
    bias bank 32 + 4 + 2 x 16 (rel_extent) = 32: attention 396; attention_input three queries 24, mlp_input 8,
    experts 192, router 16, four norms 32, convs 32, four message gates of down 16 x 2 + forget 2 x 8 + message
    2 x 8 = 64 each, 256: 956.
    The embedding 64 x 8 = 512 and its norm 8, the final norm 8, final_input 8, message_input (2 - 1) x 4 x 8 = 32,
    the lm_head 60 x 8 = 480 (unpadded_vocab_size, never tied)."""
    raw = {"model_type": "inkling2_loop_text", "vocab_size": 64, "unpadded_vocab_size": 60, "hidden_size": 8,
           "num_hidden_layers": 2, "layer_types": ["hybrid_sliding", "hybrid"], "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 4, "swa_num_attention_heads": 2, "swa_num_key_value_heads": 1,
           "swa_head_dim": 4, "sliding_window_size": 8, "rel_extent": 16, "d_rel": 2, "conv_kernel_size": 2,
           "moe_intermediate_size": 4, "n_routed_experts": 2, "num_experts_per_tok": 1, "loop_gate_rank": 2,
           "n_layers_per_attn_res_block": 1, "loop_layer_index_start": 1, "loop_layer_index_end": 2}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.largest_module) == ("fast", 512 + 8 + 8 + 8 + 32 + 480 + 612 + 956,
                                                                    512)
    assert counts.active == counts.total - 2 * 192 // 2  # one of two experts idle in each layer


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "inkling2_loop_text", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change", [
    {"loop_layer_index_start": 3},  # not a multiple of n_layers_per_attn_res_block
    {"loop_config": {"core_start": 0}},
])
def test_a_config_transformers_refuses_is_one_clear_error(change):
    assert_refused({"model_type": "inkling2_loop_text", **SMALL, **change},
                   CLASS_REFUSES + "'validate_architecture'")


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"loop_layer_index_end": 0}, "RuntimeError: Trying to create tensor with negative dimension"),
    ({"n_layers_per_attn_res_block": 0}, "ZeroDivisionError"),
])
def test_a_config_the_model_cannot_build_is_one_clear_error_not_a_traceback(change, said):
    """The class accepts both; building the model fails (once a traceback from the planner)."""
    assert_refused({"model_type": "inkling2_loop_text", **SMALL, **change}, said)


@pytest.mark.slow  # builds on the meta device: make test only
def test_an_activation_holding_a_tensor_is_left_to_the_meta_device():
    """prelu as the router's scoring function holds one weight a layer: the formulas once counted it as sigmoid."""
    from by_hand_checks import assert_declined

    counts, _ = assert_declined({"model_type": "inkling2_loop_text", **SMALL, "scoring_func": "prelu"})
    assert counts.total == count_params(from_config({"model_type": "inkling2_loop_text", **SMALL}, "")).total + 8
