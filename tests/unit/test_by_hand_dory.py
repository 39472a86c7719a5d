"""Dory is counted from its config without torch (trl_ds/plan/by_hand/dory.py), exactly as the meta device builds
it: its released config.json lists each layer as an attention block and an "mlp" block, with every layer count
doubled, and the config class halves them on read (to_dict doubles them again), so both forms must give one count;
it went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config

SMALL = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "n_input_layers": 1,
         "n_output_layers": 1}
DOUBLED = {**SMALL, "num_hidden_layers": 8, "n_input_layers": 2, "n_output_layers": 2, "n_recurrent_layers": 4,
           "layer_types": [kind for i in range(4) for kind in ("full_attention" if i % 2 else "sliding_attention",
                                                               "mlp")]}
VARIANTS = {
    "defaults": {},  # 36 layers, 4.2B: no SMALL
    "small": SMALL,
    "yarn RoPE on full attention": {**SMALL, "rope_parameters": {
        "full_attention": {"rope_type": "yarn", "rope_theta": 1e7, "factor": 4.0,
                           "original_max_position_embeddings": 4096},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "small, as released: blocks and counts doubled": DOUBLED,
    "doubled, an odd layer count floors": {**DOUBLED, "num_hidden_layers": 9, "n_input_layers": 3,
                                           "n_output_layers": 3, "n_recurrent_layers": None},
    "own layer_types and RoPE, recurrent count given": {
        **SMALL, "layer_types": ["full_attention"] * 4, "n_recurrent_layers": 2, "n_recurrent_loops": 3,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 50000.0}}},
    "biases, odd heads": {**SMALL, "attention_bias": True, "mlp_bias": True, "num_attention_heads": 3,
                          "num_key_value_heads": 3, "head_dim": 12, "recurrent_kv_cache_mode": "last_loop"},
}


def test_a_small_config_counts_as_worked_by_hand():
    """The released form: 4 blocks in layer_types, so 2 layers (and 1 input, 0 recurrent, 1 output layer). h 32, 4
    heads of 8 (q width 32), 2 key/value heads (16), MLP 48. Each layer: lambda_1, lambda_2 2 x 32 = 64; attention's
    sqk and s_gate 2 x 32 = 64, q 1024, k 512, v 512, o 1024, gate_proj 1024 (4,160); the MLP's suv_gate, suv_up
    2 x 48 = 96 and gate, up, down 3 x 1536 (4,704): 8,928. The embedding 3,200, the untied lm_head 3,200 and its
    logit_scale 100; the L2 norms hold nothing."""
    raw = {**SMALL, "model_type": "dory", "num_hidden_layers": 4, "n_input_layers": 2, "n_output_layers": 2,
           "layer_types": ["sliding_attention", "mlp", "full_attention", "mlp"]}
    counts = count_params(from_config(raw, "by hand"))
    assert (counts.method, counts.total, counts.largest_module) == ("fast", 2 * 8928 + 3200 + 3300, 3300)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "dory", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_a_tied_lm_head_is_left_to_the_meta_device_and_counted_exactly():
    """Tied, the lm_head keeps its logit_scale (vocab) while its weight is the embedding: the by-hand interface reads
    the untied head's size from the lm_head module's first tensor, which would take the logit_scale for a head, so
    settings() declines it and the meta device counts it."""
    _, meta = assert_declined({"model_type": "dory", **SMALL, "tie_word_embeddings": True})
    assert meta.lm_head == 0


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"n_recurrent_layers": 1}, "Class validation error for validator 'validate_architecture'"),
    ({**DOUBLED, "layer_types": DOUBLED["layer_types"][:-1], "num_hidden_layers": 7,
      "n_recurrent_layers": None},
     "Class validation error for validator 'validate_layer_type'"),  # 4 layers listed, 3 counted
    ({"attention_dropout": 0}, "Validation error for field 'attention_dropout'"),  # @strict: 0 is no float
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "dory", **SMALL, **change}, f"StrictDataclass\\w*Error: {said}")
