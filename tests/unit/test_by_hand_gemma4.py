"""Gemma 4's text models are counted from their config without torch (trl_ds/plan/by_hand/gemma4.py), exactly as the
meta device builds them: which tensors a layer holds depends on its position (the last num_kv_shared_layers hold no
key/value projections, a full-attention layer with attention_k_eq_v no v_proj, per_layer_config's entries their own
head_dim), which no shape template expresses, and both types went to the meta device (about 3 s, imports torch)."""
import json

import pytest
from by_hand_checks import assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused
from test_family_survey import assert_planned_without_torch_within_3x_a_preset

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
OVERRIDE = {"head_dim": 8, "num_key_value_heads": 4}
VARIANTS = {
    "defaults": {},  # 30 layers, 5.08B: no SMALL
    "small": SMALL,
    "k_eq_v, global kv heads": {**SMALL, "attention_k_eq_v": True, "num_global_key_value_heads": 1,
                                "global_head_dim": 32},
    "kv shared, double-wide MLP": {**SMALL, "num_kv_shared_layers": 2, "use_double_wide_mlp": True},
    "every layer kv shared": {**SMALL, "num_kv_shared_layers": 8, "attention_k_eq_v": True},
    "moe, untied": {**SMALL, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
                    "moe_intermediate_size": 24, "tie_word_embeddings": False},
    "no per-layer inputs, biases": {**SMALL, "hidden_size_per_layer_input": 0, "attention_bias": True},
    "own layer_types, last forced full": {**SMALL, "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 6},
    "own per_layer_config": {**SMALL, "per_layer_config": {"5": OVERRIDE, "7": OVERRIDE}},
}
CASES = [("gemma4_text", name) for name in VARIANTS] + [
    ("gemma4_unified_text", name) for name in ("defaults", "small", "k_eq_v, global kv heads",
                                               "kv shared, double-wide MLP")]


def test_a_small_config_counts_as_worked_by_hand():
    """Two layers: a sliding one (head_dim 16: q 4096, q/k norms 16 + 16, k and v 2048 each, o 4096, MLP 3 x 6144,
    four norms 4 x 64 = 31,008) and the last, full attention at global_head_dim 32 (q 8192, norms 32 + 32, k and v 4096
    each, o 8192, MLP 18,432, norms 256 = 43,328); the tied embedding 20,480 and the final norm 64."""
    raw = {**SMALL, "model_type": "gemma4_unified_text", "num_hidden_layers": 2, "global_head_dim": 32}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.largest_module) == ("fast", 20480 + 64 + 31008 + 43328, 20480)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("model_type,variant", CASES)
def test_each_variant_counts_as_the_meta_device_builds_it(model_type, variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": model_type, **VARIANTS[variant]})


def test_the_moe_block_is_active_for_top_k_experts_of_its_experts():
    raw = {"model_type": "gemma4_text", **VARIANTS["moe, untied"]}
    counts = count_params(from_config(raw, "moe"))
    experts_per_layer = 4 * (2 * 24 * 64 + 64 * 24)  # fused gate_up and down projections
    assert counts.total - counts.active == 8 * experts_per_layer // 4 * 2  # 2 of 4 idle in each of 8 layers


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"per_layer_config": {"5": OVERRIDE, "7": {"head_dim": 24}}}, "Layer type 'full_attention' is not homogeneous"),
    ({"num_kv_shared_layers": 3}, "The set of layer types producing a cache is different"),
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "gemma4_text", **SMALL, **change}, f"ValueError: {said}")


@pytest.mark.slow  # fresh interpreters: make test only
def test_planning_gemma4_takes_under_a_second_without_torch(tmp_path):
    """Under a second of wall on an idle machine (scripts/bench_plan_count.py). Here, on a shared machine: within 3x
    the CPU time of a preset's plan (the same imports, no count to make) measured beside it."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4_text"}))

    def counted_here(plan):
        assert (plan["architecture"]["count"], plan["parameters"]) == ("fast", 5077177856)  # the meta device's
    assert_planned_without_torch_within_3x_a_preset(f"model.name_or_path={tmp_path}", counted_here)


@pytest.mark.slow  # builds on the meta device: make test only
def test_more_kv_shared_layers_than_layers_is_left_to_the_meta_device():
    """10 of 8 layers "shared": transformers then keeps k/v in layers counted from the end, which the formulas do not
    follow (they counted no k/v at all, 135,696 parameters too few by the review's arithmetic)."""
    assert_declined({"model_type": "gemma4_text", **SMALL, "num_kv_shared_layers": 10})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change", [{"enable_moe_block": True}, {"layer_types": []}, {"per_layer_config": {"x": {}}}])
def test_a_config_the_formulas_cannot_read_is_one_clear_error_not_a_traceback(change):
    """An MoE block with no num_experts, an empty layer_types, a per_layer_config not keyed by layer: each ended the
    plan in a TypeError or IndexError of the formulas; the meta path now says what transformers says."""
    assert_refused({"model_type": "gemma4_text", **SMALL, **change}, "")


@pytest.mark.slow  # builds on the meta device: make test only
def test_no_layers_at_all_is_left_to_the_meta_device():
    """It ended the plan in an IndexError of the formulas; transformers builds it."""
    assert_declined({"model_type": "gemma4_text", **SMALL, "num_hidden_layers": 0})
