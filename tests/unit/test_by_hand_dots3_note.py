"""dots3 Note's text model is counted from its config without torch (trl_ds/plan/by_hand/dots3_note.py), exactly as
the meta device builds it: a layer's attention sizes come from its `per_layer_config` entry (by default the sliding
layers', from the `swa_*` keys), which layers hold an indexer follows `layer_types`, and which hold experts
`mlp_layer_types`; no shape template expresses which layers an entry names."""
import json

import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config, layout, meta_layout

SMALL = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 16,
         "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 4,
         "num_experts_per_tok": 2, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "v_head_dim": 8,
         "qk_nope_head_dim": 8, "head_dim": 16, "index_n_heads": 2, "index_head_dim": 16,
         "shared_experts_intermediate_size": 32, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
SWA = {"swa_num_attention_heads": 2, "swa_num_key_value_heads": 2, "swa_q_lora_rank": 12, "swa_kv_lora_rank": 8,
       "swa_head_dim": 24, "swa_qk_nope_head_dim": 16, "swa_v_head_dim": 4}
HALF_HEADS = {"num_attention_heads": 2, "num_key_value_heads": 2}
VARIANTS = {
    "defaults": {},  # 46 layers, 256 experts: no SMALL
    "small, the class's sliding sizes": SMALL,
    "small, own sliding sizes, biases": {**SMALL, **SWA, "attention_bias": True},
    "without DSA, dense layers, tied, two shared experts": {
        **SMALL, "use_dsa": False, "first_k_dense_replace": 2, "moe_layer_freq": 2, "tie_word_embeddings": True,
        "n_shared_experts": 2},
    "own layer_types and entries, one equal to the global value": {
        **SMALL, "layer_types": ["full_attention", "sliding_attention", "indexed_attention", "sliding_attention",
                                 "full_attention", "sliding_attention"],
        "per_layer_config": {"1": HALF_HEADS, "3": HALF_HEADS, "5": {**HALF_HEADS, "v_head_dim": 8},
                             "2": {"index_n_heads": 3, "q_lora_rank": 8}}},
    "no sliding window, MoE list, aliases": {
        **SMALL, "use_sliding_window": False, "moe_layer_freq": [1, 0, 1, 1, 0, 1], "num_local_experts": 6,
        "moe_shared_expert_intermediate_size": 12},
    "own mlp_layer_types, full layers without DSA": {
        **SMALL, "mlp_layer_types": ["sparse", "dense", "sparse", "dense", "dense", "sparse"], "use_dsa": False,
        "layer_types": ["indexed_attention"] * 3 + ["sliding_attention"] * 3},
}


def test_a_small_config_counts_as_worked_by_hand():
    """Two layers, both indexed attention (the first two always are), hidden 8, 2 heads, q_lora 4, kv_lora 4, rope
    2, nope 2, v 2, an indexer of 1 head x 2. Attention per layer: q_a 8 x 4 = 32, its norm 4, q_b 4 x 2 x (2 + 2) =
    32, kv_a 8 x (4 + 2) = 48, its norm 4, kv_b 4 x 2 x (2 + 2) = 32, o 2 x 2 x 8 = 32, rope norm 2, gate 8 x 2 = 16,
    indexer wq_b 4 x 2 = 8, wk 8 x 2 = 16, LayerNorm 2 + 2, weights 8 x 1 = 8: 238. Layer 0 is dense (the first
    first_k_dense_replace = 1): MLP 3 x 8 x 12 = 288, two norms 16: 542. Layer 1, sparse: two experts 2 x (2 x 4 x
    8) + 2 x 8 x 4 = 192, router 2 x 8 = 16, a shared expert 3 x 8 x 4 = 96, norms 16: 558. The embedding 16 x 8 =
    128, the final norm 8, the untied lm_head 128."""
    raw = {"model_type": "dots3_note_text", "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 4, "kv_lora_rank": 4,
           "qk_rope_head_dim": 2, "qk_nope_head_dim": 2, "v_head_dim": 2, "head_dim": 4, "index_n_heads": 1,
           "index_head_dim": 2, "intermediate_size": 12, "moe_intermediate_size": 4, "n_routed_experts": 2,
           "num_experts_per_tok": 1, "shared_experts_intermediate_size": 4, "pad_token_id": None}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.largest_module) == ("fast", 128 + 8 + 128 + 542 + 558, 192)
    assert counts.active == counts.total - 192 // 2  # one of the two experts idle


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "dots3_note_text", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_no_per_layer_config_counts_as_built_and_so_does_its_written_form():
    """`per_layer_config: null` leaves the sliding layers at the global sizes. transformers writes no
    per_layer_config back for it, and reading that back derives the class's sliding entries again: a different
    model (207,424 parameters here, 115,426,672 written back). Each counts as the meta device builds it, so the shared
    check's round trip cannot hold for this one config."""
    from transformers import AutoConfig

    raw = {**SMALL, "per_layer_config": None}
    written = json.loads(AutoConfig.for_model("dots3_note_text", **raw).to_json_string())
    for config in ({"model_type": "dots3_note_text", **raw}, written):
        arch = from_config(config, "by hand")
        meta = meta_layout(arch.config_json)
        assert count_params(arch).method == "fast"
        assert sorted(map(sorted, layout(arch).modules)) == sorted(map(sorted, meta.modules))
    assert [count_params(from_config(c, "")).total for c in ({"model_type": "dots3_note_text", **raw}, written)] == [
        207424, 115426672]


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change", [
    {"swa_num_attention_heads": 2},  # kv heads left at 64
    {"per_layer_config": {"2": HALF_HEADS}},  # layer 3 is sliding too: not one size set per layer type
])
def test_a_config_transformers_refuses_is_one_clear_error(change):
    assert_refused({"model_type": "dots3_note_text", **SMALL, **change},
                   CLASS_REFUSES + "'validate_architecture'")


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_rope_the_formulas_decline_is_still_counted_exactly_on_the_meta_device():
    """settings() follows the default RoPE only: other kinds have their own keys to validate, which the formulas do
    not check, so the meta device decides. RoPE holds no parameters, so the count is the default RoPE's."""
    linear = {"rope_type": "linear", "factor": 2.0}
    assert_declined({"model_type": "dots3_note_text", **SMALL, "rope_parameters": linear},
                    same_as={"model_type": "dots3_note_text", **SMALL})


@pytest.mark.slow  # builds on the meta device: make test only
def test_an_activation_holding_a_tensor_is_left_to_the_meta_device():
    """xielu holds tensors in every MLP it runs in: the formulas once counted it as silu."""
    counts, _ = assert_declined({"model_type": "dots3_note_text", **SMALL, "hidden_act": "xielu"})
    assert counts.total > count_params(from_config({"model_type": "dots3_note_text", **SMALL}, "")).total
