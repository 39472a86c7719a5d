"""Zyphra's ZAYA1, counted from its config as transformers 5.24 builds ZayaForCausalLM. No shape template fits it:
its attention is CCA (Compressed Convolutional Attention), whose two causal convolutions over the joint q/k channels
hold weights of (heads + kv heads) x head_dim channels, the grouped one a head_dim-wide kernel per group; the value
projection is split in two halves of kv x head_dim // 2 (a floor); and the router is a small MLP over
`router_hidden_size` with one extra class (the skip expert), whose first layer alone has no `router_states_scale`
(layer 0 has no earlier router state to mix in). Every layer also holds two residual scalings of four h-vectors, and
the model a scale and bias on its input. A tied lm_head keeps its own bias where `lm_head_bias` is set.
`layer_types` (derived: every layer "hybrid") changes no tensor; it is checked because the model refuses kinds it
has no RoPE entry for.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    ROPE_KEYS,
    accepted_rope,
    decoder,
    dotted,
    is_size,
    linear,
    number,
    odd_rotary,
    pad_fits,
    strict_values,
)

TYPES = ("zaya",)
FIELDS = {  # configuration_zaya.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (262272, int), "hidden_size": (2048, int), "num_hidden_layers": (40, int),
    "num_attention_heads": (8, int), "num_key_value_heads": (2, int), "hidden_act": ("silu", str),
    "max_position_embeddings": (131072, int), "initializer_range": (0.02, float), "rms_norm_eps": (1e-5, float),
    "use_cache": (True, bool), "tie_word_embeddings": (True, bool), "rope_parameters": (None, dict, None),
    "sliding_window": (None, int, None), "attention_dropout": (0.0, float, int), "moe_intermediate_size": (2048, int),
    "num_experts_per_tok": (1, int), "num_experts": (16, int), "output_router_logits": (False, bool),
    "layer_types": (None, [str], None), "pad_token_id": (0, int, None), "bos_token_id": (2, int, None),
    "eos_token_id": (106, int, [int], None), "head_dim": (128, int), "attention_bias": (False, bool),
    "lm_head_bias": (False, bool), "router_hidden_size": (256, int), "cca_time0": (2, int), "cca_time1": (2, int),
}
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
         "moe_intermediate_size", "num_experts", "router_hidden_size", "cca_time0", "cca_time1")
KINDS = ("hybrid", "hybrid_sliding")  # the layer types ZayaConfig has default RoPE for


def plain_rope(rope, kinds: List[str], head_dim: int) -> bool:
    """Whether `rope_parameters` gives an accepted RoPE (accepted_rope) with a theta for every layer type used (an
    entry of None: none), as ZAYA's own defaults do; other forms the meta device decides."""
    if rope is None:
        return True
    entries = [rope.get(kind, "missing") for kind in set(kinds)]
    return set(rope) <= {*KINDS, "rope_type"} and all(p is None or (
        accepted_rope(p, ROPE_KEYS) and "rope_theta" in p and number(p.get("partial_rotary_factor", 1.0))
        and not odd_rotary(head_dim, p.get("partial_rotary_factor", 1.0))) for p in entries)


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__; None where transformers refuses it (validate_architecture, @strict, a padding
    index outside the vocabulary), where the lm_head is tied but keeps a bias (the planner reads an lm_head module as
    an untied head), and for RoPE or activations the meta device must check."""
    c = strict_values(raw, FIELDS)
    if c is None:
        return None
    layers = c["num_hidden_layers"]
    kinds = ["hybrid"] * layers if c["layer_types"] is None else list(c["layer_types"])
    if (not all(is_size(c[k]) for k in SIZES) or c["num_experts_per_tok"] != 1
            or c["num_attention_heads"] % c["num_key_value_heads"] or len(kinds) != layers
            or not set(kinds) <= set(KINDS) or ("hybrid_sliding" in kinds and c["sliding_window"] is None)
            or not pad_fits(c["pad_token_id"], c["vocab_size"])
            or c["hidden_act"] not in ACTIVATIONS or "rope_scaling" in raw
            or not plain_rope(c["rope_parameters"], kinds, c["head_dim"])
            or (c["tie_word_embeddings"] and c["lm_head_bias"])):
        return None
    return {**c, "layer_types": kinds, "raw": raw}


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, heads, kv, hd, bias = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                              c["attention_bias"])
    experts, f, r = c["num_experts"], c["moe_intermediate_size"], c["router_hidden_size"]
    channels = (heads + kv) * hd  # the convolutions run over q and k together
    out: Dict[str, List[int]] = {}

    linear(out, "self_attn.o_proj", heads * hd, h, bias)
    linear(out, "self_attn.qkv_proj.q_proj", h, heads * hd, bias)
    linear(out, "self_attn.qkv_proj.k_proj", h, kv * hd, bias)
    linear(out, "self_attn.qkv_proj.v_proj_current", h, kv * hd // 2, bias)
    linear(out, "self_attn.qkv_proj.v_proj_delayed", h, kv * hd // 2, bias)
    out["self_attn.qkv_proj.conv_qk_depthwise"] = [channels * c["cca_time0"], channels]  # one channel per group
    out["self_attn.qkv_proj.conv_qk_grouped"] = [channels * hd * c["cca_time1"], channels]  # a head per group
    out["self_attn.qk_norm"] = [kv]  # its learned key temperature
    if i:  # the first router has no earlier router state to scale
        out["mlp.gate"] = [r]
    linear(out, "mlp.gate.down_proj", h, r, bias=True)
    out["mlp.gate.router_mlp.norm"] = [r]
    linear(out, "mlp.gate.router_mlp.fc1", r, r, bias=True)
    linear(out, "mlp.gate.router_mlp.fc2", r, r, bias=True)
    linear(out, "mlp.gate.router_mlp.out_proj", r, experts + 1)  # and the skip expert
    out["mlp.experts"] = [experts * 2 * f * h, experts * h * f]  # fused gate_up and down projections
    out["post_attention_residual_scale"] = [h] * 4
    out["post_mlp_residual_scale"] = [h] * 4
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h = c["hidden_size"]
    out = {"model": [h, h], **decoder(c, layer_modules)}  # the input's scale and bias
    if c["lm_head_bias"]:  # (settings declines a tied lm_head that keeps one)
        out["lm_head"].append(c["vocab_size"])
    return out


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: a field's value, else what the config.json set (any key becomes an
    attribute), else None."""
    return dotted({**c["raw"], **c}, name)
