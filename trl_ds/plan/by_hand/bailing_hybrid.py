"""inclusionAI's Ling 3 hybrid (bailing_hybrid), counted from its config as transformers 5.24 builds
BailingHybridForCausalLM. No shape template fits it: which tensors a layer holds depends on its position in two
derived lists. `layer_types` (derived: the last layer of every `layer_group_size` is "full_attention", the rest
"linear_attention") picks MLA attention with a head-wise output gate, or KDA linear attention (q/k/v, a depthwise
convolution, a forget gate, a gated output norm); `mlp_layer_types` (derived: the first `first_k_dense_replace` layers
"dense", the rest "sparse") picks a dense MLP, or routed experts with a router and shared experts. The KDA sizes come
from keys __post_init__ derives before it overwrites `head_dim` with `qk_rope_head_dim` (`linear_head_dim` is the
given head_dim), and a config.json that sets them, as transformers writes them back, keeps its own. Several keys are
stored under another name (attribute_map: num_local_experts as num_experts, n_shared_experts as num_shared_experts):
a config.json may give either, and the stored name, read last, wins. The lm_head is never tied (no tied weights).
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    LEGACY,
    ROPE_KEYS,
    accepted_rope,
    below,
    decoder,
    dotted,
    gated_mlp,
    is_size,
    latent_attention,
    linear,
    number,
    odd_rotary,
    pad_fits,
    routed_experts,
    strict_values,
    well_typed,
)

TYPES = ("bailing_hybrid",)
FIELDS = {  # configuration_bailing_hybrid.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (157184, int), "hidden_size": (2560, int), "intermediate_size": (6144, int),
    "moe_intermediate_size": (768, int), "num_hidden_layers": (42, int), "num_attention_heads": (32, int),
    "num_key_value_heads": (32, int, None), "n_shared_experts": (1, int), "output_router_logits": (False, bool),
    "routed_scaling_factor": (2.5, float), "kv_lora_rank": (512, int), "q_lora_rank": (None, int, None),
    "qk_rope_head_dim": (64, int), "v_head_dim": (128, int), "qk_nope_head_dim": (128, int), "n_group": (8, int),
    "topk_group": (4, int), "num_experts_per_tok": (8, int), "first_k_dense_replace": (2, int),
    "norm_topk_prob": (True, bool), "hidden_act": ("silu", str), "max_position_embeddings": (262144, int),
    "initializer_range": (0.02, float), "rms_norm_eps": (1e-6, float), "use_cache": (True, bool),
    "pad_token_id": (156892, int, None), "bos_token_id": (None, int, None),
    "eos_token_id": (156895, int, [int], None), "pretraining_tp": (1, int, None),
    "tie_word_embeddings": (False, bool), "rope_parameters": (None, dict, None), "attention_bias": (False, bool),
    "attention_dropout": (0.0, float), "num_mtp_layers": (1, int), "num_local_experts": (512, int),
    "rope_theta": (6_000_000.0, float, int), "head_dim": (128, int), "short_conv_kernel_size": (4, int),
    "layer_group_size": (6, int), "kda_safe_gate": (True, bool), "kda_lower_bound": (-5.0, float),
    "layer_types": (None, [str], None), "mlp_layer_types": (None, [str], None),
    "mtp_loss_scaling_factor": (0.0, float, int),
}
STORED_AS = {"num_local_experts": "num_experts", "num_experts_per_tok": "num_experts_per_token",  # attribute_map
             "n_shared_experts": "num_shared_experts", "n_group": "num_expert_group",
             "norm_topk_prob": "moe_renormalize", "max_position_embeddings": "model_max_length",
             "num_mtp_layers": "num_nextn_predict_layers"}
DERIVED = {"linear_head_dim": "head_dim", "linear_num_heads": "num_attention_heads",  # __post_init__'s, from
           "linear_conv_kernel_dim": "short_conv_kernel_size"}
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim",
         "qk_nope_head_dim", "num_local_experts", "layer_group_size", *DERIVED)


def plain_rope(rope, partial, head_dim: int) -> bool:
    """Whether `rope_parameters` is one RoPE dict of a kind accepted_rope takes (the class derives a default one);
    nested forms the meta device decides."""
    rope = rope or {}
    partial = rope.get("partial_rotary_factor", 1.0 if partial is None else partial)  # the given one, else the key
    return accepted_rope(rope, ROPE_KEYS) and number(partial) \
        and not odd_rotary(head_dim, partial)


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__ (its lists derived, a key's stored name over its field name); None where
    transformers refuses it (@strict, lists of the wrong kinds or length, a padding index outside the vocabulary, a
    zero that divides), and for RoPE or activations the meta device must check."""
    c = strict_values(raw, FIELDS)
    if c is None or not well_typed(raw, {k: (None, int) for k in DERIVED}) or not well_typed(
            raw, {stored: FIELDS[k] for k, stored in STORED_AS.items()}):
        return None  # @strict refuses it, or the model cannot take it
    c.update({k: raw[stored] for k, stored in STORED_AS.items() if stored in raw})  # set last, so it wins
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    c.update({k: raw.get(k, c[given]) for k, given in DERIVED.items()})
    layers, group, dense = c["num_hidden_layers"], c["layer_group_size"], c["first_k_dense_replace"]
    if not all(is_size(c[k]) for k in SIZES) or c["n_shared_experts"] < 0:
        return None
    kinds = [LEGACY.get(k, k) for k in c["layer_types"]] if c["layer_types"] is not None else [
        "full_attention" if (i + 1) % group == 0 else "linear_attention" for i in range(layers)]
    mlps = list(c["mlp_layer_types"]) if c["mlp_layer_types"] is not None else [
        "dense" if i < dense else "sparse" for i in range(layers)]
    pad, q_rank = c["pad_token_id"], c["q_lora_rank"]
    if (len(kinds) != layers or len(mlps) != layers or not set(kinds) <= {"full_attention", "linear_attention"}
            or not set(mlps) <= {"dense", "sparse"} or (q_rank is not None and q_rank < 1)
            or not pad_fits(pad, c["vocab_size"])
            or c["hidden_act"] not in ACTIVATIONS or "rope_scaling" in raw
            or not plain_rope(c["rope_parameters"], raw.get("partial_rotary_factor"), c["qk_rope_head_dim"])):
        return None
    return {**c, "layer_types": kinds, "mlp_layer_types": mlps, "raw": raw}


def attention_modules(c: dict, full: bool) -> Dict[str, List[int]]:
    """The attention's modules (below self_attn): MLA with a head-wise gate, or KDA linear attention."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    out: Dict[str, List[int]] = {}
    if full:
        latent_attention(out, h, heads, c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"],
                         c["qk_rope_head_dim"], c["v_head_dim"], c["attention_bias"])
        linear(out, "g_proj", h, heads)
        return out
    d, n = c["linear_head_dim"], c["linear_num_heads"]
    for name in ("q_proj", "k_proj", "v_proj", "forget_gate.f_proj", "g_proj"):
        linear(out, name, h, d * n)
    out["conv1d"] = [3 * d * n * c["linear_conv_kernel_dim"]]  # depthwise over q, k and v, no bias
    out["forget_gate"] = [n, d * n]  # A_log, dt_bias
    linear(out, "b_proj", h, n)
    out["o_norm"] = [d]
    linear(out, "o_proj", d * n, h)
    return out


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly: the attention, then a dense
    SwiGLU MLP, or routed experts, their router and the shared experts."""
    h = c["hidden_size"]
    out = below("self_attn", attention_modules(c, c["layer_types"][i] == "full_attention"))
    if c["mlp_layer_types"][i] == "sparse":
        routed_experts(out, "mlp", h, c["num_local_experts"], c["moe_intermediate_size"])
        gated_mlp(out, "mlp.shared_experts", h, c["moe_intermediate_size"] * c["n_shared_experts"])
    else:
        gated_mlp(out, "mlp", h, c["intermediate_size"])
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head is never tied."""
    return decoder(c, layer_modules, lm_head=[c["vocab_size"] * c["hidden_size"]])


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: a field's value under either of its names (head_dim is overwritten with
    qk_rope_head_dim), else what the config.json set (any key becomes an attribute), else None."""
    name = {stored: k for k, stored in STORED_AS.items()}.get(name, name)
    return dotted({**c["raw"], **c, "head_dim": c["qk_rope_head_dim"]}, name)
