"""Lara Mini (lara_mini), counted from its config as transformers 5.24 builds it (LaraMiniForCausalLM): no shape
template fits it, because what a layer holds depends on its position in `layer_types`, which the class derives where
a config leaves it out: the released pattern repeats every 5 layers (linear, sliding, linear, full, sliding), so 34
layers hold 14 gated delta nets and 20 attentions, a count no fixed ratio gives. A "linear_attention" layer holds a
gated delta net (its projections, a depthwise conv, per-value-head dt_bias and A_log, a gated norm); any other kind an
attention with q/k norms. Every layer holds an MoE block: routed experts, a router and an ungated shared expert.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import linear, over_defaults
from trl_ds.plan.by_hand.hy_v4 import ACTIVATIONS, ATTENTION_TYPES, LEGACY, listed, plain_rope, well_typed

# hy_v4's checks serve here too: both classes are strict dataclasses of transformers 5.24

TYPES = ("lara_mini",)
DEFAULTS = {  # configuration_lara_mini.py: every size the model reads, and what the strict dataclass checks the type of
    "vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 34, "num_attention_heads": 16,
    "num_key_value_heads": 4, "tie_word_embeddings": True, "attention_bias": False, "head_dim": 128,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 8,
    "linear_num_value_heads": 16, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_experts_per_tok": 4, "num_experts": 128, "sliding_window": 512, "hidden_act": "silu",
}
PATTERN = ["linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention"]


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with layer_types derived as __post_init__ derives it; None for a
    config transformers refuses (heads not a multiple of key/value heads, a list of the wrong length or kinds, a pad
    token outside the vocabulary, a value of the wrong type) and for one these formulas leave to the meta device
    (RoPE other than default, an unusual activation)."""
    if not well_typed(raw, DEFAULTS, ("num_hidden_layers", "num_experts")) or not plain_rope(raw) or raw.get(
            "hidden_act", "silu") not in ACTIVATIONS:
        return None
    c = over_defaults(raw, DEFAULTS)
    layers, vocab, pad = c["num_hidden_layers"], c["vocab_size"], raw.get("pad_token_id")
    kinds = raw.get("layer_types")
    kinds = [PATTERN[i % len(PATTERN)] for i in range(layers)] if kinds is None else kinds
    mlp = raw.get("mlp_layer_types")  # no field, and the model ignores it, but validate_layer_type checks it
    if not (c["num_attention_heads"] % c["num_key_value_heads"] == 0 and  # validate_architecture
            c["linear_num_value_heads"] % c["linear_num_key_heads"] == 0 and
            listed(kinds, layers, ATTENTION_TYPES + tuple(LEGACY)) and
            (mlp is None or listed(mlp, layers, ("dense", "sparse"))) and
            (pad is None or type(pad) is int and -vocab <= pad < vocab)):  # nn.Embedding's padding_idx
        return None
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
    heads, kv, hd, bias = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["attention_bias"]
    linear(out, "self_attn.q_proj", h, heads * hd, bias)
    linear(out, "self_attn.k_proj", h, kv * hd, bias)
    linear(out, "self_attn.v_proj", h, kv * hd, bias)
    linear(out, "self_attn.o_proj", heads * hd, h, bias)
    out["self_attn.q_norm"] = out["self_attn.k_norm"] = [hd]
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h, vocab, experts, f = c["hidden_size"], c["vocab_size"], c["num_experts"], c["moe_intermediate_size"]
    shared = c["shared_expert_intermediate_size"]
    out = {"model.embed_tokens": [vocab * h], "model.norm": [h]}
    for i, kind in enumerate(c["layer_types"]):
        layer = f"model.layers.{i}"
        out.update({f"{layer}.{name}": sizes for name, sizes in mixer_modules(c, kind).items()})
        out[f"{layer}.mlp.experts"] = [experts * 2 * f * h, experts * h * f]
        out[f"{layer}.mlp.gate"] = [experts * h]
        linear(out, f"{layer}.mlp.shared_expert.gate_proj", h, shared)
        linear(out, f"{layer}.mlp.shared_expert.up_proj", h, shared)
        linear(out, f"{layer}.mlp.shared_expert.down_proj", shared, h)
        out[f"{layer}.input_layernorm"] = out[f"{layer}.post_attention_layernorm"] = [h]
    if not c["tie_word_embeddings"]:
        out["lm_head"] = [vocab * h]
    return out


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: the class has no intermediate_size, but any key the config gives is an
    attribute."""
    value = {**c["raw"], **c}
    for part in name.split("."):  # a dotted name reads into a dict the config gives
        value = value.get(part) if isinstance(value, dict) else None
    return value
