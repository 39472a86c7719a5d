"""Laguna, counted from its config as transformers 5.24 builds LagunaForCausalLM. Each layer takes its own head
count from `num_attention_heads_per_layer` (derived as `num_attention_heads` everywhere where a config leaves it
out), and its MLP from `mlp_layer_types` ("sparse": fused routed experts, a router with a correction bias and a
shared expert; else dense; derived as the first layer dense, the rest sparse). The output gate g_proj is one value per
head where `gating` is True or "per-head", and one per channel (heads x head_dim) for any other value, False
included. The sizes depend on each list's items, not on how many layers are of a kind, so no shape template fits.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    ROPE_KEYS,
    accepted_rope,
    attention,
    decoder,
    gated_mlp,
    is_size,
    linear,
    number,
    odd_rotary,
    pad_fits,
    routed_experts,
    strict_values,
)

TYPES = ("laguna",)
FIELDS = {  # configuration_laguna.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (100352, int), "hidden_size": (2048, int), "intermediate_size": (8192, int),
    "num_hidden_layers": (40, int), "num_attention_heads": (48, int), "num_key_value_heads": (8, int),
    "hidden_act": ("silu", str), "max_position_embeddings": (131072, int), "initializer_range": (0.02, float),
    "rms_norm_eps": (1e-6, float), "use_cache": (True, bool), "tie_word_embeddings": (False, bool),
    "rope_parameters": (None, dict, None), "sliding_window": (512, int), "attention_dropout": (0.0, float, int),
    "moe_intermediate_size": (512, int), "shared_expert_intermediate_size": (512, int),
    "num_experts_per_tok": (8, int), "num_experts": (256, int), "output_router_logits": (False, bool),
    "router_aux_loss_coef": (0.001, float), "layer_types": (None, [str], None),
    "pad_token_id": (None, int, None), "bos_token_id": (None, int, None),
    "eos_token_id": (None, int, [int], None), "head_dim": (128, int), "attention_bias": (False, bool),
    "gating": (True, bool, str), "num_attention_heads_per_layer": (None, [int], None),
    "mlp_layer_types": (None, [str], None), "moe_routed_scaling_factor": (1.0, float),
    "moe_apply_router_weight_on_input": (False, bool), "moe_router_logit_softcapping": (0.0, float),
}
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim")
WIDTHS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
          "num_experts")  # 0 builds empty tensors; below 0 nothing builds
KINDS = ("full_attention", "sliding_attention")  # the RoPE types the class has defaults for


def plain_rope(rope, kinds: List[str]) -> bool:
    """Whether `rope_parameters` gives an accepted RoPE (accepted_rope) for each layer type used, keyed by type as the
    class writes it; other forms the meta device decides."""
    return rope is None or set(kinds) <= set(rope) <= set(KINDS) and all(
        accepted_rope(p, ROPE_KEYS) and {"rope_type", "rope_theta"} <= set(p)  # both given
        and number(p.get("partial_rotary_factor", 1.0)) for p in rope.values())


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__ (its per-layer lists derived where left out); None where transformers refuses
    it, and for RoPE, activations or layer kinds the meta device must check."""
    c = strict_values(raw, FIELDS)
    if c is None:
        return None
    layers = c["num_hidden_layers"]
    derived = {"layer_types": ["full_attention"] * layers, "mlp_layer_types": ["dense"] + ["sparse"] * (layers - 1),
               "num_attention_heads_per_layer": [c["num_attention_heads"]] * layers}
    c.update({k: v for k, v in derived.items() if c[k] is None})  # an empty list stays empty
    kinds, mlps, heads = c["layer_types"], c["mlp_layer_types"], c["num_attention_heads_per_layer"]
    if (c["moe_apply_router_weight_on_input"] or {len(kinds), len(mlps), len(heads)} != {layers}
            or not set(mlps) <= {"dense", "sparse"} or not all(is_size(c[k]) for k in SIZES)
            or not all(is_size(c[k], may_be_0=True) for k in WIDTHS) or min(heads) < 1
            or not pad_fits(c["pad_token_id"], c["vocab_size"])):
        return None  # validate_architecture, validate_layer_type, a zero division, nn.Embedding's assert
    if (not set(kinds) <= set(KINDS) or not plain_rope(c["rope_parameters"], kinds) or "rope_scaling" in raw
            or not number(raw.get("rope_theta", 0.0)) or c["hidden_act"] not in ACTIVATIONS):
        return None
    if odd_rotary(c["head_dim"]):
        return None  # validate_rope refuses an odd head rotated whole; rotated in part, the meta device decides
    return {**c, "raw": raw}


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, hd, heads = c["hidden_size"], c["head_dim"], c["num_attention_heads_per_layer"][i]
    out = {"self_attn.q_norm": [hd], "self_attn.k_norm": [hd]}
    attention(out, "self_attn", h, heads, c["num_key_value_heads"], hd, c["attention_bias"])
    per_head = c["gating"] is True or c["gating"] == "per-head"
    linear(out, "self_attn.g_proj", h, heads if per_head else heads * hd)
    if c["mlp_layer_types"][i] == "sparse":
        routed_experts(out, "mlp", h, c["num_experts"], c["moe_intermediate_size"])
        out["mlp.gate"].append(c["num_experts"])  # the router's e_score_correction_bias
        gated_mlp(out, "mlp.shared_experts", h, c["shared_expert_intermediate_size"])
    else:
        gated_mlp(out, "mlp", h, c["intermediate_size"])
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    return decoder(c, layer_modules)


def attribute(c: dict, name: str):
    """What the planner reads of the config (num_attention_heads is the global one); a key the class does not
    declare is set as given."""
    return c[name] if name in FIELDS else c["raw"].get(name)
