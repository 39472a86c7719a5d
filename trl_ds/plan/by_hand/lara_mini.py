"""Lara Mini (lara_mini), counted from its config as transformers 5.24 builds it (LaraMiniForCausalLM): no shape
template fits it, because what a layer holds depends on its position in `layer_types`, which the class derives where
a config leaves it out: the released pattern repeats every 5 layers (linear, sliding, linear, full, sliding), so 34
layers hold 14 gated delta nets and 20 attentions, a count no fixed ratio gives. A "linear_attention" layer holds a
gated delta net (its projections, a depthwise conv, per-value-head dt_bias and A_log, a gated norm); any other kind an
attention with q/k norms. Every layer holds an MoE block: routed experts, a router and an ungated shared expert.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    KNOWN_KINDS,
    LEGACY,
    accepted_rope_only,
    attention,
    decoder,
    dotted,
    fits,
    gated_mlp,
    is_size,
    linear,
    listed,
    odd_rotary,
    pad_fits,
    routed_experts,
    strict_values,
)

TYPES = ("lara_mini",)
FIELDS = {  # configuration_lara_mini.py: every size the model reads, its default and the type @strict takes
    "vocab_size": (151936, int), "hidden_size": (1024, int), "num_hidden_layers": (34, int),
    "num_attention_heads": (16, int), "num_key_value_heads": (4, int), "tie_word_embeddings": (True, bool),
    "attention_bias": (False, bool), "head_dim": (128, int), "linear_conv_kernel_dim": (4, int),
    "linear_key_head_dim": (128, int), "linear_value_head_dim": (128, int), "linear_num_key_heads": (8, int),
    "linear_num_value_heads": (16, int), "moe_intermediate_size": (512, int),
    "shared_expert_intermediate_size": (512, int), "num_experts_per_tok": (4, int), "num_experts": (128, int),
    "sliding_window": (512, int), "hidden_act": ("silu", str),
}
MAY_BE_0 = ("num_hidden_layers", "num_experts")  # a 0 elsewhere some module may divide by
PATTERN = ["linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention"]


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with layer_types derived as __post_init__ derives it; None for a
    config transformers refuses (heads not a multiple of key/value heads, a list of the wrong length or kinds, a pad
    token outside the vocabulary, a wrong type in a field FIELDS checks, an odd head rotated whole) and for one these
    formulas leave to the meta device (RoPE accepted_rope does not take, an unusual activation)."""
    c = strict_values(raw, FIELDS)
    if c is None or not all(is_size(v, k in MAY_BE_0) for k, v in c.items() if fits(v, int)):
        return None
    if c["hidden_act"] not in ACTIVATIONS or not accepted_rope_only(raw):
        return None
    layers, vocab, pad = c["num_hidden_layers"], c["vocab_size"], raw.get("pad_token_id")
    kinds = raw.get("layer_types")
    kinds = [PATTERN[i % len(PATTERN)] for i in range(layers)] if kinds is None else kinds
    mlp = raw.get("mlp_layer_types")  # no field, and the model ignores it, but validate_layer_type checks it
    if not (c["num_attention_heads"] % c["num_key_value_heads"] == 0 and  # validate_architecture
            c["linear_num_value_heads"] % c["linear_num_key_heads"] == 0 and
            listed(kinds, layers, KNOWN_KINDS) and (mlp is None or listed(mlp, layers, ("dense", "sparse"))) and
            pad_fits(pad, vocab)):
        return None
    if odd_rotary(c["head_dim"]):
        return None  # validate_rope refuses an odd head rotated whole; rotated in part, the meta device decides
    return {**c, "layer_types": [LEGACY.get(k, k) for k in kinds], "raw": raw}


def mixer_modules(c: dict, kind: str) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor its gated delta net or attention holds."""
    h = c["hidden_size"]
    out: Dict[str, List[int]] = {}
    if kind == "linear_attention":
        v_heads, key_dim = c["linear_num_value_heads"], c["linear_num_key_heads"] * c["linear_key_head_dim"]
        value_dim = v_heads * c["linear_value_head_dim"]
        out["linear_attn"] = [v_heads, v_heads]  # dt_bias, A_log
        out["linear_attn.conv1d"] = [(2 * key_dim + value_dim) * c["linear_conv_kernel_dim"]]  # depthwise, no bias
        out["linear_attn.norm"] = [c["linear_value_head_dim"]]
        linear(out, "linear_attn.out_proj", value_dim, h)
        linear(out, "linear_attn.in_proj_qkv", h, 2 * key_dim + value_dim)
        linear(out, "linear_attn.in_proj_z", h, value_dim)
        linear(out, "linear_attn.in_proj_b", h, v_heads)
        linear(out, "linear_attn.in_proj_a", h, v_heads)
        return out
    hd = c["head_dim"]
    attention(out, "self_attn", h, c["num_attention_heads"], c["num_key_value_heads"], hd, c["attention_bias"])
    out["self_attn.q_norm"], out["self_attn.k_norm"] = [hd], [hd]
    return out


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly: the mixer, then the MoE block."""
    h = c["hidden_size"]
    out = mixer_modules(c, c["layer_types"][i])
    routed_experts(out, "mlp", h, c["num_experts"], c["moe_intermediate_size"])
    gated_mlp(out, "mlp.shared_expert", h, c["shared_expert_intermediate_size"])
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    return decoder(c, layer_modules)


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: the class has no intermediate_size, but any key the config gives is an
    attribute."""
    return dotted({**c["raw"], **c}, name)
