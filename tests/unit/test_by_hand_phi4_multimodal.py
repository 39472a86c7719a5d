"""Phi-4 multimodal is counted from its config without torch (trl_ds/plan/by_hand/phi4_multimodal.py), exactly as the
meta device builds it: the text decoder plus the vision and audio towers its sub-configs describe, with the audio
input projection as wide as a size the config class derives (nemo_final_size) and one more pair of subsampling
convolutions per halving, which no shape template expresses; it went to the meta device (about 3 s, imports torch)."""
import pytest
from by_hand_checks import CLASS_REFUSES, assert_counts_as_the_meta_device_builds_it, assert_declined, assert_refused

from trl_ds.plan.params import count_params, from_config

VISION = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
          "image_size": 56, "patch_size": 14}
AUDIO = {"hidden_size": 32, "intermediate_size": 40, "num_blocks": 2, "num_attention_heads": 4,
         "ext_pw_out_channel": 24, "depthwise_separable_out_channel": 28, "nemo_conv_channels": 16,
         "bias_max_distance": 50, "input_size": 81}
SMALL = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "pad_token_id": 0,  # the default 199999: past vocab
         "vision_config": VISION, "audio_config": AUDIO}
LONGROPE = {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 6, "long_factor": [2.5] * 6},
            "partial_rotary_factor": 0.75}  # head_dim 16 x 0.75 = 12 rotary dims: 6 factors each
VARIANTS = {
    "defaults": {},  # 5.31B: no SMALL
    "small": SMALL,
    "tied, kv heads left to None, one halving, wide depthwise, symmetric bias": {
        **SMALL, "tie_word_embeddings": True, "num_key_value_heads": None,
        "vision_config": {**VISION, "image_size": 42},  # 3 patches a side: padded, not counted
        "audio_config": {**AUDIO, "time_reduction": 2, "depthwise_multiplier": 2, "bias_symmetric": True,
                         "downsample_rate": 3, "kernel_size": 5}},
    "longrope, partial rotary": {**SMALL, **LONGROPE, "original_max_position_embeddings": 1024},
    "time_reduction 6 (two halvings), nemo_final_size given": {
        **SMALL, "audio_config": {**AUDIO, "time_reduction": 6, "nemo_final_size": 7}},
    "time_reduction 16, head_dims given": {
        **SMALL, "head_dim": 24, "audio_config": {**AUDIO, "time_reduction": 16, "input_size": 100, "head_dim": 12}},
    "sub-configs left to None, a small decoder": {**SMALL, "vision_config": None, "audio_config": None},
}


def test_a_small_config_counts_as_worked_by_hand():
    """Text (hidden 16, 2 heads of 8, 1 kv head): embedding 100 x 16 = 1600, final norm 16, untied lm_head 1600; its
    one layer qkv 16 x (2 + 2) x 8 = 512, o 256, gate_up 16 x 64 = 1024, down 512, two norms 32 = 2336.
    Vision (hidden 8, MLP 16, 28 / 14 = 2 patches a side): patch conv 8 x 3 x 14 x 14 + 8 = 4712, positions 4 x 8 = 32;
    its layer q, k, v, out 4 x 72, fc1 144, fc2 136, two LayerNorms 32 = 600; post_layernorm 16; head: probe 8,
    fused in_proj 192 + 24, out_proj 72, LayerNorm 16, MLP 280 = 592: the tower 5952. Beside it the two separators
    8 + 8, img_projection_up 8 x 16 + 16 = 144, img_projection_down 272: 432.
    Audio (hidden 8, 2 heads of 4, time_reduction 4: two halvings, nemo_final_size 10 -> 5 -> 3, 2 channels): conv.0
    2 x 9 + 2 = 20, conv.2 (depthwise) 20, conv.3 (pointwise) 2 x 2 + 2 = 6, out 2 x 3 x 8 + 8 = 56; bias_values
    (5 x 2 buckets) x 2 heads = 20; its block: two MLPs 2 x (LayerNorm 16 + gate_up 8 x 16 + 16 + down 72) = 464,
    q, k, v, o 4 x 72 = 288, conv module LayerNorm 16 + b1, b2 8 + GLU conv 8 x 8 + 8 + depthwise 8 x 3 + 8 +
    pointwise 8 x 8 + 8 + ext_pw 8 x 4 + 4 = 236, two LayerNorms 32 = 1020: the encoder 1142; the speech and
    vision-speech projections 2 x (144 + 272) = 832."""
    raw = {"model_type": "phi4_multimodal", "vocab_size": 100, "hidden_size": 16, "intermediate_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "pad_token_id": 0,
           "vision_config": {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
           "audio_config": {"hidden_size": 8, "intermediate_size": 8, "num_blocks": 1, "num_attention_heads": 2,
                            "ext_pw_out_channel": 4, "depthwise_separable_out_channel": 8, "input_size": 10,
                            "time_reduction": 4, "nemo_conv_channels": 2, "bias_max_distance": 5}}
    counts = count_params(from_config(raw, "by hand"))
    text, vision, audio = 1600 + 16 + 1600 + 2336, 5952 + 432, 1142 + 832
    assert (counts.method, counts.total, counts.largest_module) == ("fast", text + vision + audio, 4712)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_counts_as_the_meta_device_builds_it(variant):
    assert_counts_as_the_meta_device_builds_it({"model_type": "phi4_multimodal", **VARIANTS[variant]})


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change,said", [
    ({"audio_config": {**AUDIO, "time_reduction": 3}}, CLASS_REFUSES + "'validate_architecture'"),
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 5, "long_factor": [1.0] * 6}},
     CLASS_REFUSES + "'validate_rope'"),
    ({"vision_config": {**VISION, "num_attention_heads": 5}},
     "AssertionError: embed_dim must be divisible by num_heads"),
])
def test_a_config_transformers_refuses_is_one_clear_error(change, said):
    assert_refused({"model_type": "phi4_multimodal", **SMALL, **change}, said)


@pytest.mark.slow  # builds on the meta device: make test only
@pytest.mark.parametrize("change", [
    {"audio_config": {**AUDIO, "activation": "prelu"}},  # nn.PReLU holds a weight in each audio MLP
    {"rope_scaling": {**LONGROPE["rope_scaling"], "type": "yarn"}, "partial_rotary_factor": 0.75},  # read as longrope
])
def test_a_config_the_formulas_decline_is_still_counted_exactly(change):
    """Activations that hold parameters, and the legacy "su"/"yarn" RoPE types the class renames to longrope after
    standardizing them, are left to the meta device rather than written out here."""
    assert_declined({"model_type": "phi4_multimodal", **SMALL, **change})
