"""Phi-4 multimodal, counted from its config as transformers 5.24 builds it (Phi4MultimodalForCausalLM): the Phi-3
style text decoder (fused qkv_proj and gate_up_proj) and, inside model.embed_tokens_extend, a SigLIP-like vision tower
and a Conformer audio encoder, each built from its own sub-config (vision_config, audio_config). No shape template
fits: the towers' sizes come from the sub-configs, not the top level, and the audio input projection is as wide as
`nemo_conv_channels * nemo_final_size`, a size the config class derives from `input_size` by halving it once per
factor of two in `time_reduction` (rounding up), while its subsampling stack holds one more pair of convolutions for
each such halving past the first. Type errors, activations and RoPE settings transformers refuses, and activations
that hold parameters (prelu, xielu), go to the meta device.
"""
import math
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    below,
    decoder,
    dotted,
    fits,
    is_size,
    linear,
    number,
    odd_rotary,
    pad_fits,
    strict_values,
)

TYPES = ("phi4_multimodal",)
TEXT = {  # configuration_phi4_multimodal.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (200064, int), "hidden_size": (3072, int), "intermediate_size": (8192, int),
    "num_hidden_layers": (32, int), "num_attention_heads": (32, int), "num_key_value_heads": (8, int, None),
    "resid_pdrop": (0.0, int, float), "embd_pdrop": (0.0, int, float), "attention_dropout": (0.0, int, float),
    "hidden_act": ("silu", str), "max_position_embeddings": (131072, int),
    "original_max_position_embeddings": (4096, int, None), "initializer_range": (0.02, float),
    "rms_norm_eps": (1e-5, float), "use_cache": (True, bool), "tie_word_embeddings": (False, bool),
    "rope_parameters": (None, dict, None), "bos_token_id": (199999, int, None),
    "eos_token_id": (None, int, [int], None), "pad_token_id": (199999, int, None), "sliding_window": (None, int, None),
    "vision_config": (None, dict, None), "audio_config": (None, dict, None),
}
VISION = {
    "hidden_size": (1152, int), "intermediate_size": (4304, int), "num_hidden_layers": (27, int),
    "num_attention_heads": (16, int), "num_channels": (3, int), "image_size": (448, int, list, tuple),
    "patch_size": (14, int, list, tuple), "hidden_act": ("gelu_pytorch_tanh", str),
    "layer_norm_eps": (1e-6, float), "attention_dropout": (0.0, int, float), "crop_size": (448, int),
    "image_token_id": (200010, int), "feature_layer": (-2, int),
}
AUDIO = {
    "hidden_size": (1024, int), "intermediate_size": (1536, int), "num_blocks": (24, int),
    "num_attention_heads": (16, int), "activation": ("swish", str), "chunk_size": (-1, int),
    "left_chunk": (18, int), "dropout_rate": (0.0, int, float), "ext_pw_out_channel": (1024, int),
    "depthwise_separable_out_channel": (1024, int), "depthwise_multiplier": (1, int), "kernel_size": (3, int),
    "conv_activation": ("swish", str), "input_size": (80, int), "conv_glu_type": ("swish", str),
    "time_reduction": (8, int), "bias_max_distance": (1000, int), "bias_symmetric": (False, bool),
    "nemo_activation": ("relu", str), "nemo_conv_channels": (1024, int), "downsample_rate": (1, int),
    "initializer_range": (0.02, float), "audio_token_id": (200011, int), "feature_layer": (-2, int),
}
SIZES = {  # what the formulas read: each at least 1 (smaller ones the meta device decides)
    "text": ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads"),
    "vision": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_channels",
               "image_size", "patch_size"),
    "audio": ("hidden_size", "intermediate_size", "num_blocks", "num_attention_heads", "ext_pw_out_channel",
              "depthwise_separable_out_channel", "depthwise_multiplier", "kernel_size", "input_size",
              "bias_max_distance", "nemo_conv_channels", "downsample_rate"),
}
BASE_CHECKS = ("num_heads", "embed_dim", "per_layer_config", "layer_types", "mlp_layer_types", "output_attentions",
               "problem_type", "id2label", "label2id")  # keys PreTrainedConfig's own validation reads


def sub_config(raw: dict, key: str, fields: dict) -> Optional[dict]:
    """The sub-config's values over its class defaults; None where @strict refuses one (an eos_token_id list too, which
    PreTrainedConfig types), or it sets a key PreTrainedConfig's own validation reads."""
    given = raw.get(key) or {}
    eos = given.get("eos_token_id")
    if isinstance(eos, list) and not fits(eos, [int]) or any(k in given for k in BASE_CHECKS):
        return None
    return strict_values(given, fields)


def rope_accepted(raw: dict, t: dict) -> bool:
    """Whether Phi4MultimodalConfig's RoPE checks, and the rotary embedding's build, pass (rope_scaling wins, as
    convert_rope_params_to_dict reads it; "su"/"yarn", renamed longrope, the meta device decides)."""
    rope = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        return False
    kind = rope.get("rope_type", rope.get("type", "default"))
    factor = rope["partial_rotary_factor"] if "partial_rotary_factor" in rope else raw.get("partial_rotary_factor", 1.0)
    theta = rope["rope_theta"] if "rope_theta" in rope else raw.get("rope_theta", 10000.0)
    if kind not in ("default", "longrope") or not (number(factor) and number(theta)):
        return False
    rotary = int(t["hidden_size"] // t["num_attention_heads"] * factor)
    head_dim = raw.get("head_dim")
    if head_dim is not None and odd_rotary(head_dim, factor):
        return False
    for key in ("short_factor", "long_factor"):
        values = rope.get(key)
        if (values is not None or kind == "longrope") and not (isinstance(values, list) and all(
                isinstance(v, (int, float)) for v in values) and len(values) == rotary // 2):
            return False
    if kind == "longrope":  # the build reads the top-level original_max_position_embeddings, factor, head_dim
        original = t["original_max_position_embeddings"]  # as given: None is refused
        scales = [rope.get(k) for k in ("factor", "attention_factor") if rope.get(k) is not None]
        return (isinstance(original, int) and original > 1 and t["max_position_embeddings"] > 0 and not rotary % 2
                and head_dim in (None, t["hidden_size"] // t["num_attention_heads"])
                and all(map(number, scales)))
    return True


def settings(raw: dict) -> Optional[dict]:
    """The text, vision and audio values over the class defaults; None where the class or model would refuse the
    config, or where the formulas were not written for it (see the module docstring)."""
    t = strict_values(raw, TEXT)
    if t is None or any(k in raw for k in BASE_CHECKS):
        return None
    if t["num_key_value_heads"] is None:  # as many as the query heads
        t["num_key_value_heads"] = t["num_attention_heads"]
    v, a = sub_config(raw, "vision_config", VISION), sub_config(raw, "audio_config", AUDIO)
    if v is None or a is None:
        return None
    given_audio = raw.get("audio_config") or {}
    head_dims = [raw.get("head_dim", 1), given_audio.get("head_dim", 1)]  # a config.json may set them: read as given
    sizes = [t[k] for k in SIZES["text"]] + [v[k] for k in SIZES["vision"]] + [a[k] for k in SIZES["audio"]]
    if not all(map(is_size, sizes + head_dims)) or not {
            t["hidden_act"], v["hidden_act"], a["activation"], a["conv_activation"], a["conv_glu_type"],
            a["nemo_activation"]} <= set(ACTIVATIONS):
        return None
    if not pad_fits(raw.get("pad_token_id", 199999), t["vocab_size"]):
        return None
    if v["hidden_size"] % v["num_attention_heads"] or v["image_size"] < v["patch_size"]:
        return None  # nn.MultiheadAttention asserts the first; the second leaves no patch to embed
    if a["time_reduction"] < 2 or a["time_reduction"] % 2 or not rope_accepted(raw, t):
        return None  # an odd time_reduction the class refuses, a non-positive one math.log2 does
    halvings = int(math.log2(a["time_reduction"]))
    final = a["input_size"]
    for _ in range(halvings):  # Phi4MultimodalAudioConfig.__post_init__, a given nemo_final_size set after it
        final = math.floor((final - 1) / 2 + 1)
    final = given_audio.get("nemo_final_size", final)
    if not is_size(final):
        return None
    a.update(nemo_final_size=final, halvings=halvings,
             head_dim=given_audio.get("head_dim", a["hidden_size"] // a["num_attention_heads"]))
    t["head_dim"] = raw.get("head_dim")
    return {"text": t, "vision": v, "audio": a, "raw": raw}


def norm(out: Dict[str, List[int]], name: str, width: int) -> None:
    """nn.LayerNorm(width): its weight and bias."""
    out[name] = [width, width]


def vision_modules(v: dict) -> Dict[str, List[int]]:
    """The SigLIP-like tower (below img_processor): patch and position embeddings, encoder layers with biased
    projections, the final norm and the attention-pooling head (an nn.MultiheadAttention with a fused in_proj)."""
    h, f, side = v["hidden_size"], v["intermediate_size"], v["image_size"] // v["patch_size"]
    out = {"embeddings.patch_embedding": [h * v["num_channels"] * v["patch_size"] ** 2, h],
           "embeddings.position_embedding": [side * side * h]}
    for i in range(v["num_hidden_layers"]):
        p = f"encoder.layers.{i}."
        for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
            linear(out, p + "self_attn." + name, h, h, True)
        linear(out, p + "mlp.fc1", h, f, True)
        linear(out, p + "mlp.fc2", f, h, True)
        norm(out, p + "layer_norm1", h)
        norm(out, p + "layer_norm2", h)
    norm(out, "post_layernorm", h)
    out["head"] = [h]  # the probe
    out["head.attention"] = [3 * h * h, 3 * h]
    linear(out, "head.attention.out_proj", h, h, True)
    norm(out, "head.layernorm", h)
    linear(out, "head.mlp.fc1", h, f, True)
    linear(out, "head.mlp.fc2", f, h, True)
    return out


def audio_modules(a: dict) -> Dict[str, List[int]]:
    """The Conformer encoder (below audio_embed.encoder): the subsampling convolutions, relative attention bias and
    blocks of two half-step MLPs, attention and a convolution module, every projection and convolution biased."""
    h, f, heads, hd = a["hidden_size"], a["intermediate_size"], a["num_attention_heads"], a["head_dim"]
    ch, ext, sep, wide = a["nemo_conv_channels"], a["ext_pw_out_channel"], a["depthwise_separable_out_channel"], \
        h * a["depthwise_multiplier"]
    out = {"embed.conv.0": [ch * 9, ch]}  # Conv2d(1, ch, 3)
    for k in range(a["halvings"] - 1):  # a depthwise 3x3 and a pointwise conv, then the shared activation
        out[f"embed.conv.{2 + 3 * k}"] = [ch * 9, ch]
        out[f"embed.conv.{3 + 3 * k}"] = [ch * ch, ch]
    linear(out, "embed.out", ch * a["nemo_final_size"], h, True)
    buckets = a["bias_max_distance"] * (1 if a["bias_symmetric"] else 2)
    out["relative_attention_bias_layer.bias_values"] = [buckets * heads]
    for i in range(a["num_blocks"]):
        p = f"encoders.{i}."
        for mlp in ("feed_forward_in", "feed_forward_out"):
            norm(out, f"{p}{mlp}.layer_norm", h)
            linear(out, f"{p}{mlp}.gate_up_proj", h, 2 * f, True)
            linear(out, f"{p}{mlp}.down_proj", f, h, True)
        for name in ("q_proj", "k_proj", "v_proj"):
            linear(out, f"{p}self_attn.{name}", h, heads * hd, True)
        linear(out, f"{p}self_attn.o_proj", heads * hd, h, True)
        norm(out, p + "conv.layer_norm", h)
        out[p + "conv.glu"] = [ext, ext]  # b1, b2
        linear(out, p + "conv.glu.ext_pw_conv_1d", h, 2 * ext, True)  # 1-wide Conv1d: a linear's numel
        out[p + "conv.dw_sep_conv_1d.dw_conv"] = [wide * a["kernel_size"], wide]  # grouped: one input channel each
        linear(out, p + "conv.dw_sep_conv_1d.pw_conv", wide, sep, True)
        linear(out, p + "conv.ext_pw_conv_1d", h, ext, True)
        norm(out, p + "layer_norm_att", h)
        norm(out, p + "layer_norm", h)
    return out


def layer_modules(t: dict, i: int) -> Dict[str, List[int]]:
    """A text decoder layer (below model.layers.i): fused qkv_proj and gate_up_proj, no biases."""
    h, heads, kv, f = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["intermediate_size"]
    hd = t["head_dim"] or h // heads
    out: Dict[str, List[int]] = {}
    linear(out, "self_attn.qkv_proj", h, (heads + 2 * kv) * hd)
    linear(out, "self_attn.o_proj", heads * hd, h)
    linear(out, "mlp.gate_up_proj", h, 2 * f)
    linear(out, "mlp.down_proj", f, h)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters (the towers within model.embed_tokens_extend); the
    lm_head only where it is not tied."""
    t, v, a = c["text"], c["vision"], c["audio"]
    h = t["hidden_size"]
    image, audio = "model.embed_tokens_extend.image_embed", "model.embed_tokens_extend.audio_embed"
    towers = {image: [v["hidden_size"], v["hidden_size"]],  # the global and sub-image separators
              **below(f"{image}.img_processor", vision_modules(v)), **below(f"{audio}.encoder", audio_modules(a))}
    linear(towers, image + ".img_projection_up", v["hidden_size"], h, True)
    linear(towers, image + ".img_projection_down", h, h, True)
    for mode in ("speech", "vision_speech"):
        linear(towers, f"{audio}.up_proj_for_{mode}", a["hidden_size"] * a["downsample_rate"], h, True)
        linear(towers, f"{audio}.down_proj_for_{mode}", h, h, True)
    return decoder(t, layer_modules, towers)


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: a field's value, else a key the config.json set (transformers keeps it as
    an attribute), else None."""
    return c["text"][name] if name in c["text"] else dotted(c["raw"], name)
