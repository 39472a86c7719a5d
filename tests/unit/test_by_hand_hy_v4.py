"""Hunyuan V4 (hy_v4) is counted from its config without torch (trl_ds/plan/by_hand/hy_v4.py), exactly as the meta
device builds it: which layers hold an MoE block and which their own sparse-attention indexer follows two lists the
class derives where a config leaves them out (one dense layer first; a full indexer at layer 0 and every fourth from
layer 1), which no shape template expresses."""
import pytest
from by_hand_checks import assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.by_hand.hy_v4 import settings
from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 6, "pad_token_id": None,  # the default pad
         "num_attention_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,  # is past 320
         "qk_rope_head_dim": 4, "v_head_dim": 8, "index_n_heads": 2, "index_head_dim": 8, "n_routed_experts": 4,
         "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 48, "hc_mult": 2}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}  # a long-context config's
VARIANTS = {
    "defaults": {},  # 34 layers, 58.3B
    "small, lists derived": SMALL,  # 6 layers: layers 0, 1 and 5 hold indexers, layer 0 a dense MLP
    "one layer": {**SMALL, "num_hidden_layers": 1},
    "yarn RoPE": {**SMALL, "rope_parameters": YARN},
    "tied, biases, pad token counted from the end": {**SMALL, "tie_word_embeddings": True, "attention_bias": True,
                                                     "pad_token_id": -3},
    "own lists, legacy layer types": {**SMALL, "num_hidden_layers": 4,
                                      "mlp_layer_types": ["sparse", "dense", "sparse", "dense"],
                                      "indexer_types": ["shared", "full", "other", "shared", "full"],  # 1 too many
                                      "layer_types": ["attention", "deepseek_sparse_attention", "full_attention",
                                                      "sliding_attention"]},
    "num_local_experts wins, no shared experts": {**SMALL, "num_local_experts": 8, "n_shared_experts": 0},
    "default rope given": {**SMALL, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}},
}


def test_the_class_derives_three_full_indexers_for_six_layers():
    c = settings({"model_type": "hy_v4", **SMALL})
    assert c["indexer_types"] == ["full", "full", "shared", "shared", "shared", "full"]
    assert c["mlp_layer_types"] == ["dense"] + ["sparse"] * 5


def test_a_small_config_counts_as_worked_by_hand():
    """Three layers, lists derived: MLPs dense, sparse, sparse; indexers full, full, shared. Hidden 16, 2 heads.
    Every layer: sinks 2, q_a 16*8 = 128, its norm 8, q_b 8*2*(4+2) = 96, kv_a 16*(4+2) = 96, its norm 4,
    kv_b 4*2*(4+4) = 64, o 2*4*16 = 128, gate 16*8 = 128 (654); two norms 32; two hyper-connections 2 x (2*2*2*16 +
    2*2 + 2) = 268: 954. An indexer: wq_b 8*2*4 = 64, wk 16*4 = 64, k_norm (a LayerNorm) 4 + 4, weights_proj 16*2 =
    32: 168. The dense MLP 3 x 16*8 = 384; the MoE block: experts 2*(2*4*16) + 2*16*4 = 384, router 2*16 = 32,
    shared experts 3 x 16*4 = 192: 608. Layers 954+168+384, 954+168+608, 954+608; embedding 32*16 = 512, final norm
    16, hyper head 2*2*16 + 2 + 1 = 67, untied lm_head 512. Active: one of two experts, 192 idle in each MoE layer."""
    raw = {"model_type": "hy_v4", "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 3, "pad_token_id": None,
           "num_attention_heads": 2, "q_lora_rank": 8, "kv_lora_rank": 4, "qk_nope_head_dim": 4,
           "qk_rope_head_dim": 2, "v_head_dim": 4, "index_n_heads": 2, "index_head_dim": 4, "n_routed_experts": 2,
           "num_experts_per_tok": 1, "moe_intermediate_size": 4, "intermediate_size": 8, "hc_mult": 2}
    counts = count_params(from_config(raw, "by hand"))
    total = 512 + 16 + 67 + 512 + (954 + 168 + 384) + (954 + 168 + 608) + (954 + 608)
    assert (counts.method, counts.total, counts.active, counts.largest_module) == ("fast", total, total - 2 * 192,
                                                                                   512)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "hy_v4", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"pad_token_id": 120002}, "AssertionError: Padding_idx must be within num_embeddings"),  # the class default
    ({"mlp_layer_types": ["dense"] * 5}, "StrictDataclassClassValidationError: .*'validate_layer_type'"),
    ({"attention_bias": None}, "StrictDataclassFieldValidationError: .*'attention_bias'"),
    ({"indexer_types": ["full"] * 6 + [5]}, "StrictDataclassFieldValidationError: .*'indexer_types'"),  # once counted
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "hy_v4", **SMALL, **change}, said)


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_config_the_formulas_decline_is_still_counted_exactly():
    """longrope's per-dimension factor lists: the formulas do not check their lengths, so the meta device decides
    (and counts). Yarn, which a long-context config usually gives, they count (VARIANTS)."""
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 2, "long_factor": [2.0] * 2, "factor": 4.0,  # 4 // 2
            "original_max_position_embeddings": 4096}
    assert_declined({"model_type": "hy_v4", **SMALL, "rope_parameters": rope}, same_as={"model_type": "hy_v4", **SMALL})
