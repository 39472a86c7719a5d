"""Reformer's causal LM is counted from its config without torch (trl_ds/plan/by_hand/reformer.py), exactly as the
meta device builds it: a layer's attention depends on its place in attn_layers (local: query, key, value; lsh: one
query_key and value), the layer count is derived from that list unless the config gives its own, and the axial
position embeddings hold one tensor per axis, which no shape template expresses. It went to the meta device (about
3 s, imports torch). Only a decoder (is_decoder true) builds as a causal LM: the class defaults are refused."""
import pytest
from by_hand_checks import assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config, layout

SMALL = {"is_decoder": True, "vocab_size": 50, "hidden_size": 32, "num_attention_heads": 2, "attention_head_size": 8,
         "feed_forward_size": 40, "axial_pos_shape": [4, 8], "axial_pos_embds_dim": [8, 24]}
VARIANTS = {
    "defaults, as a decoder": {"is_decoder": True},  # 6 layers, 5.98M: no SMALL
    "small, attn_layers left out": SMALL,
    "small, local then lsh": {**SMALL, "attn_layers": ["local", "lsh"]},
    "lsh only, more layers than listed": {**SMALL, "attn_layers": ["lsh"], "num_hidden_layers": 3,
                                          "lsh_attn_chunk_length": None, "hidden_act": "gelu"},
    "local only, a plain position table": {**SMALL, "attn_layers": ["local", "local"], "axial_pos_embds": False,
                                           "max_position_embeddings": 100},
    "three axes, fewer layers than listed, tied": {**SMALL, "axial_pos_shape": [2, 2, 8],
                                                   "attn_layers": ["lsh", "local", "local", "lsh"],
                                                   "num_hidden_layers": 2, "tie_word_embeddings": True},
}


def test_a_small_config_counts_as_worked_by_hand():
    """Word embeddings 50 x 32 = 1600; axial position embeddings 4 x 8 + 8 x 24 = 224. The local layer: two norms of
    weight and bias 2 x 64, query, key and value 3 x 32 x 16 = 1536, output 16 x 32 = 512, feed-forward 32 x 40 + 40 =
    1320 and 40 x 32 + 32 = 1312: 4808. The lsh layer holds one projection fewer: 4808 - 512 = 4296. The final norm
    over both reversible halves 2 x 64 = 128; the untied head's decoder 64 x 50 + 50 = 3250 and its own bias 50."""
    raw = {"model_type": "reformer", **VARIANTS["small, local then lsh"]}
    arch = from_config(raw, "by hand")
    counts, lay = count_params(arch), layout(arch)
    assert (counts.method, counts.total, counts.largest_module, lay.embedding, lay.lm_head) == (
        "fast", 1600 + 224 + 4808 + 4296 + 128 + 3250 + 50, 3250, 1600, 3200)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "reformer", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
def test_an_activation_holding_a_tensor_is_left_to_the_meta_device_and_counted_exactly():
    """prelu is a module with a weight of its own in every layer's feed-forward: settings() reads only activations
    that hold nothing (ACTIVATIONS) and leaves the others to the meta device, which counts them."""
    counts, _ = assert_declined({"model_type": "reformer", **SMALL, "hidden_act": "prelu"})
    assert counts.total == count_params(from_config({"model_type": "reformer", **SMALL}, "relu")).total + 6


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("raw,said", [
    ({}, r"AssertionError: If you want to use `ReformerModelWithLMHead` make sure that `is_decoder=True`"),
    ({**SMALL, "local_num_chunks_after": 1}, r"AssertionError: If causal mask is enabled"),
    ({**SMALL, "axial_pos_embds_dim": [8, 8]}, r"ValueError: Make sure that config.axial_pos_embds factors"),
    ({**SMALL, "attn_layers": ["lsh", "local"], "lsh_attn_chunk_length": None}, r"TypeError"),
    ({**SMALL, "attn_layers": ["lsh", "global"]}, r"NotImplementedError"),  # these three ended in tracebacks
    ({**SMALL, "attn_layers": ["lsh", "local"], "num_hidden_layers": 3}, r"IndexError"),
    ({**SMALL, "axial_pos_shape": [32], "axial_pos_embds_dim": [8, 24]}, r"IndexError"),
])
def test_a_config_transformers_refuses_is_one_clear_error(raw, said):
    assert_refused({"model_type": "reformer", **raw}, said)
