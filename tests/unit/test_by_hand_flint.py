"""Flint is counted from its config without torch (trl_ds/plan/by_hand/flint.py), exactly as the meta device builds
it: a layer is sparse where its index is not in mlp_only_layers, there are experts, and (index + 1) is a multiple of
decoder_sparse_step, so which layers the list names decides the count, not how many it names; no shape template
expresses that, and flint went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 6,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4,
         "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24}
VARIANTS = {
    "defaults": {},  # 49 layers of 256 experts: no SMALL
    "small": SMALL,  # mlp_only_layers left out: [0, 1]
    "step 2, a listed layer the step skips": {**SMALL, "decoder_sparse_step": 2, "mlp_only_layers": [0, 3]},
    "an index twice and one past the last, tied": {**SMALL, "mlp_only_layers": [4, 4, 99],
                                                   "tie_word_embeddings": True},
    "every layer sparse": {**SMALL, "mlp_only_layers": []},
    "no experts: every layer dense": {**SMALL, "num_experts": 0},
    "own layer_types, biases, step 3": {**SMALL, "decoder_sparse_step": 3, "mlp_only_layers": [2],
                                        "attention_bias": True, "layer_types": ["sliding_attention"] * 6,
                                        "rope_parameters": {"rope_type": "default", "rope_theta": 50000.0}},
}


@pytest.mark.parametrize("listed,total", [([1], 3 * 7764 + 11732 + 6432), ([0], 2 * 7764 + 2 * 11732 + 6432)])
def test_a_small_config_counts_as_worked_by_hand(listed, total):
    """4 layers with decoder_sparse_step 2: layers 1 and 3 are sparse but for those mlp_only_layers names, so [1] leaves
    one sparse layer and [0] (a layer the step skips) two. Attention: sinks 4, q_norm and k_norm 8 + 8, q 32 x 32
    = 1024, k and v 32 x 16 = 512 each, o 1024 (3,092); the two layer norms 64. A dense layer adds gate, up and down
    3 x 32 x 48 = 4,608 (7,764 in all); a sparse one 4 experts' gate_up 4 x 2 x 16 x 32 = 4,096 and down 2,048,
    the router 4 x 32 = 128 and the shared expert 3 x 32 x 24 = 2,304 (11,732 in all). The embedding and the untied
    lm_head 3,200 each and the final norm 32 (6,432). Each token passes 2 of the 4 experts: 3,072 of each sparse
    layer's 6,144 idle."""
    raw = {**SMALL, "model_type": "flint", "num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": listed}
    counts = count_params(from_config(raw, "by hand"))
    sparse_layers = (total - 4 * 7764 - 6432) // (11732 - 7764)
    assert (counts.method, counts.total, counts.active) == ("fast", total, total - sparse_layers * 3072)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "flint", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 32},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192}])
def test_scaled_rope_holds_no_tensor_and_counts_as_the_meta_device_builds_it(rope):
    """A long-context config scales its RoPE (a published one often with yarn): no tensor changes, and the formulas
    count it where transformers' RoPE validation finds every key its kind requires."""
    assert_counts_as_the_meta_device_builds_it({"model_type": "flint", **SMALL, "rope_parameters": rope})


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_scaled_rope_missing_a_key_its_kind_requires_is_one_clear_error():
    assert_refused({"model_type": "flint", **SMALL, "rope_parameters": {"rope_type": "yarn",
                                                                             "original_max_position_embeddings": 64}},
                   "KeyError: \"Missing required keys in `rope_parameters` for 'rope_type'='yarn'")


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"layer_types": ["full_attention"] * 5}, CLASS_REFUSES + "'validate_layer_type'"),  # 5 listed, 6 layers
    ({"mlp_only_layers": [True]}, "StrictDataclassFieldValidationError: Validation error for field "
                                  "'mlp_only_layers'"),  # @strict: a bool is no int
    ({"decoder_sparse_step": 0}, "ZeroDivisionError: integer modulo by zero"),  # the model divides by the step
    ({"head_dim": 9}, CLASS_REFUSES + "'validate_rope'"),  # an odd head rotated whole: once counted
    ({"intermediate_size": -8}, "RuntimeError: Trying to create tensor with negative dimension"),  # once counted
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "flint", **SMALL, **change}, said)
