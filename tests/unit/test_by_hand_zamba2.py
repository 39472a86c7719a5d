"""Zamba 2 is counted from its config without torch (trl_ds/plan/by_hand/zamba2.py), exactly as the meta device builds
it: what a layer holds depends on its position (a hybrid layer of layers_block_type adds a linear and a shared
transformer block to its Mamba 2 mixer), a block's LoRA adapters are as many as the hybrid layers it serves, and tied
blocks after the first num_mem_blocks hold nothing of their own, which no shape template expresses. It went to the
meta device (imports torch; its class builds slowly at default size)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 64, "hidden_size": 32, "num_attention_heads": 4, "n_mamba_heads": 4, "mamba_d_state": 8,
         "adapter_rank": 4, "num_hidden_layers": 6, "num_mem_blocks": 2,
         "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba"]}
VARIANTS = {
    "defaults": {},  # 54 layers, 2.48B: no SMALL
    "small, two blocks tied": SMALL,
    "untied": {**SMALL, "tie_word_embeddings": False},
    "attention adapters": {**SMALL, "use_shared_attention_adapter": True},
    "attention adapters, untied": {**SMALL, "use_shared_attention_adapter": True, "tie_word_embeddings": False},
    "biases, own kv heads and MLP width": {**SMALL, "add_bias_linear": True, "num_key_value_heads": 2,
                                           "intermediate_size": 40, "use_conv_bias": False, "hidden_act": "silu"},
    "more blocks than hybrid layers, wider mixer": {**SMALL, "num_mem_blocks": 4, "mamba_expand": 3,
                                                    "mamba_ngroups": 3},
    "layers_block_type left out": {**SMALL, "layers_block_type": None, "num_hidden_layers": 54},
    "today's layer names, rotary": {**SMALL, "layers_block_type": ["hybrid"] + ["linear_attention"] * 5,
                                    "num_mem_blocks": 1, "use_mem_rope": True, "rope_theta": 500.0},
}


def test_a_small_config_counts_as_worked_by_hand():
    """Three layers, a mamba one and two hybrid ones sharing one tied block. A Mamba 2 mixer (inner 2 x 32 = 64, conv
    channels 64 + 2 x 8 = 80): dt_bias, A_log and D 3 x 4, conv1d 80 x 4 + 80, in_proj 32 x (64 + 80 + 4) = 4736,
    gated norm 64, out_proj 64 x 32 = 2048: 7260, and its layer's norm 32: 7292. A hybrid layer adds its linear
    32 x 32 = 1024. The block (attention over 2 x 32 = 64, head_dim 64 / 4 = 16): norms 64 + 32, q, k, v 3 x 64 x 64,
    o 64 x 32, gate_up 32 x 2 x 128 = 8192, down 128 x 32 = 4096, and an MLP adapter per hybrid layer it serves
    2 x (32 x 4 + 4 x 256) = 2304: 29024, held once (the second hybrid layer's is tied to it). The tied embedding
    64 x 32 = 2048 and the final norm 32."""
    raw = {"model_type": "zamba2", **SMALL, "num_hidden_layers": 3, "num_mem_blocks": 1,
           "layers_block_type": ["mamba", "hybrid", "hybrid"]}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.largest_module) == (
        "fast", 2048 + 7292 + 2 * (7292 + 1024) + 29024 + 32, 8192)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "zamba2", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change", [
    {"use_mem_rope": True, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}},
    {"layers_block_type": ["attention"] + SMALL["layers_block_type"][1:]},
    {"hidden_act": "prelu"},
])
def test_a_config_left_to_the_meta_device_is_counted_exactly(change):
    """A rotary kind other than the default (validated by the config class, which these formulas do not repeat), a
    layer kind other than mamba/hybrid (built as a mamba layer, a path not written out here) and an activation that
    holds a tensor (prelu's weight in each block's MLP) are declined, and the meta device counts them."""
    assert_declined({"model_type": "zamba2", **SMALL, **change})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"num_attention_heads": 3}, CLASS_REFUSES + "'validate_rope'"),  # head_dim 2 x 32 // 3 = 21 is odd
    ({"layers_block_type": None}, CLASS_REFUSES + "'validate_layer_type'"),  # the derived list: 54 entries, not 6
    ({"pad_token_id": 64}, "AssertionError: Padding_idx must be within num_embeddings"),
    ({"num_key_value_heads": 0}, "ZeroDivisionError"),  # once a traceback
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "zamba2", **SMALL, **change}, said)
