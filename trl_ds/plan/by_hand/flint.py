"""Flint, counted from its config as transformers 5.24 builds FlintForCausalLM. A layer holds a sparse MoE block
(fused routed experts, a router and an ungated shared expert) where its index is not in `mlp_only_layers`, there are
experts, and (index + 1) is a multiple of `decoder_sparse_step`; a dense MLP otherwise. Which layers the list names
decides the count, not how many it names: an index named twice, or past the last layer, changes nothing, and with a
step above 1 naming a layer the step skips changes nothing either; no shape template (which counts layers of a kind)
fits that. Attention holds per-head sinks and q/k norms over the head dimension.
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
    number,
    odd_rotary,
    pad_fits,
    routed_experts,
    strict_values,
)

TYPES = ("flint",)
FIELDS = {  # configuration_flint.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (150144, int), "hidden_size": (2048, int), "intermediate_size": (6144, int),
    "num_hidden_layers": (49, int), "num_attention_heads": (32, int), "num_key_value_heads": (4, int),
    "hidden_act": ("silu", str), "max_position_embeddings": (262144, int), "initializer_range": (0.02, float),
    "rms_norm_eps": (1e-6, float), "use_cache": (True, bool), "tie_word_embeddings": (False, bool),
    "rope_parameters": (None, dict, None), "sliding_window": (513, int), "attention_dropout": (0.0, float, int),
    "decoder_sparse_step": (1, int), "moe_intermediate_size": (512, int),
    "shared_expert_intermediate_size": (1024, int), "num_experts_per_tok": (6, int), "num_experts": (256, int),
    "norm_topk_prob": (True, bool), "output_router_logits": (False, bool), "router_aux_loss_coef": (0.0005, float),
    "mlp_only_layers": (None, [int], None), "layer_types": (None, [str], None),
    "pad_token_id": (None, int, None), "bos_token_id": (None, int, None),
    "eos_token_id": (None, int, [int], None), "head_dim": (128, int), "attention_bias": (False, bool),
}
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim")
WIDTHS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
          "num_experts")  # 0 builds empty tensors; below 0 nothing builds
KINDS = ("full_attention", "sliding_attention")  # others only change the mask: the meta device checks them


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__ (its layer_types and mlp_only_layers derived where left out); None where
    transformers refuses it, and for RoPE, activations or layer kinds the meta device must check."""
    c = strict_values(raw, FIELDS)
    if c is None:
        return None
    layers = c["num_hidden_layers"]
    derived = {"layer_types": ["full_attention" if i < 2 or i % 4 == 1 or i == layers - 1 else "sliding_attention"
                               for i in range(layers)], "mlp_only_layers": [0, 1]}
    c.update({k: v for k, v in derived.items() if c[k] is None})  # an empty list stays empty
    kinds, only = c["layer_types"], c["mlp_only_layers"]
    if (len(kinds) != layers or not set(kinds) <= set(KINDS) or not all(is_size(c[k]) for k in SIZES)
            or not all(is_size(c[k], may_be_0=True) for k in WIDTHS)
            or not pad_fits(c["pad_token_id"], c["vocab_size"])):
        return None  # validate_layer_type, a zero division or an empty model, nn.Embedding's assert
    if (c["decoder_sparse_step"] == 0 or c["hidden_act"] not in ACTIVATIONS or "mlp_layer_types" in raw
            or not accepted_rope(c["rope_parameters"] or {}, ROPE_KEYS[:2]) or not number(raw.get("rope_theta", 0.0))
            or {"rope_scaling", "partial_rotary_factor"} & set(raw)):
        return None  # a zero step divides by zero; RoPE accepted_rope does not take the meta device decides
    sparse = [i not in only and c["num_experts"] > 0 and (i + 1) % c["decoder_sparse_step"] == 0
              for i in range(layers)]
    if odd_rotary(c["head_dim"]):
        return None  # validate_rope refuses an odd head rotated whole; rotated in part, the meta device decides
    return {**c, "sparse": sparse, "raw": raw}


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, heads, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    out = {"self_attn": [heads], "self_attn.q_norm": [hd], "self_attn.k_norm": [hd]}  # sinks: one per head
    attention(out, "self_attn", h, heads, c["num_key_value_heads"], hd, c["attention_bias"])
    if c["sparse"][i]:
        routed_experts(out, "mlp", h, c["num_experts"], c["moe_intermediate_size"])
        gated_mlp(out, "mlp.shared_expert", h, c["shared_expert_intermediate_size"])
    else:
        gated_mlp(out, "mlp", h, c["intermediate_size"])
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    return decoder(c, layer_modules)


def attribute(c: dict, name: str):
    """What the planner reads of the config; a key the class does not declare is set as given."""
    return c[name] if name in FIELDS else c["raw"].get(name)
