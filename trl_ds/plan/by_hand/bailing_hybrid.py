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

from trl_ds.plan.by_hand import linear, over_defaults

TYPES = ("bailing_hybrid",)
LIST, DICT = "list", "dict"
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
    "eos_token_id": (156895, int, (LIST, int), None), "pretraining_tp": (1, int, None),
    "tie_word_embeddings": (False, bool), "rope_parameters": (None, DICT, None), "attention_bias": (False, bool),
    "attention_dropout": (0.0, float), "num_mtp_layers": (1, int), "num_local_experts": (512, int),
    "rope_theta": (6_000_000.0, float, int), "head_dim": (128, int), "short_conv_kernel_size": (4, int),
    "layer_group_size": (6, int), "kda_safe_gate": (True, bool), "kda_lower_bound": (-5.0, float),
    "layer_types": (None, (LIST, str), None), "mlp_layer_types": (None, (LIST, str), None),
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
LEGACY = {"attention": "full_attention", "mamba": "linear_attention"}  # what PreTrainedConfig renames
ACTIVATIONS = ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "relu2", "tanh")


def fits(value, kind) -> bool:
    """Whether @strict takes `value` for one member of a field's annotation (an int is no float, a bool no int)."""
    if kind is None:
        return value is None
    if isinstance(kind, tuple):
        return isinstance(value, list) and all(fits(v, kind[1]) for v in value)
    if kind == DICT:
        return isinstance(value, dict)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plain_rope(rope, partial, head_dim: int) -> bool:
    """Whether `rope_parameters` is one default-RoPE dict, as the class derives it; other forms (scaled, nested)
    go through RoPE validation and the MLA's yarn scaling, which the meta device runs."""
    if rope is None:
        rope = {}
    partial = rope.get("partial_rotary_factor", 1.0 if partial is None else partial)
    return isinstance(rope, dict) and set(rope) <= {"rope_type", "rope_theta", "partial_rotary_factor"} and (
        rope.get("rope_type", "default") == "default" and number(rope.get("rope_theta", 0.0)) and number(partial)
        and not (head_dim > 4 and head_dim % 2 and int(head_dim * partial) == head_dim))  # validate_rope's check


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__ (its lists derived, a key's stored name over its field name); None where
    transformers refuses it (@strict, lists of the wrong kinds or length, a padding index outside the vocabulary, a
    zero that divides), and for RoPE or activations the meta device must check."""
    if any(k in raw and not any(fits(raw[k], kind) for kind in kinds) for k, (_, *kinds) in FIELDS.items()) or any(
            k in raw and not fits(raw[k], int) for k in DERIVED) or any(
            stored in raw and not any(fits(raw[stored], kind) for kind in FIELDS[k][1:])
            for k, stored in STORED_AS.items()):
        return None  # @strict refuses it, or the model cannot take it
    c = over_defaults(raw, {k: default for k, (default, *_) in FIELDS.items()})
    c.update({k: raw[k] for k in ("num_key_value_heads", "q_lora_rank", "pad_token_id") if k in raw})  # None: a value
    c.update({k: raw[stored] for k, stored in STORED_AS.items() if stored in raw})  # set last, so it wins
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    c.update({k: raw.get(k, c[given]) for k, given in DERIVED.items()})
    layers, group, dense = c["num_hidden_layers"], c["layer_group_size"], c["first_k_dense_replace"]
    if any(not fits(c[k], int) or c[k] < 1 for k in SIZES) or c["n_shared_experts"] < 0:
        return None
    kinds = [LEGACY.get(k, k) for k in c["layer_types"]] if c["layer_types"] is not None else [
        "full_attention" if (i + 1) % group == 0 else "linear_attention" for i in range(layers)]
    mlps = list(c["mlp_layer_types"]) if c["mlp_layer_types"] is not None else [
        "dense" if i < dense else "sparse" for i in range(layers)]
    pad, q_rank = c["pad_token_id"], c["q_lora_rank"]
    if (len(kinds) != layers or len(mlps) != layers or not set(kinds) <= {"full_attention", "linear_attention"}
            or not set(mlps) <= {"dense", "sparse"} or (q_rank is not None and q_rank < 1)
            or (pad is not None and not -c["vocab_size"] <= pad < c["vocab_size"])
            or c["hidden_act"] not in ACTIVATIONS or "rope_scaling" in raw
            or not plain_rope(c["rope_parameters"], raw.get("partial_rotary_factor"), c["qk_rope_head_dim"])):
        return None
    return {**c, "layer_types": kinds, "mlp_layer_types": mlps, "raw": raw}


def attention_modules(c: dict, full: bool) -> Dict[str, List[int]]:
    """The attention's modules (below self_attn): MLA with a head-wise gate, or KDA linear attention."""
    h, heads, bias = c["hidden_size"], c["num_attention_heads"], c["attention_bias"]
    out: Dict[str, List[int]] = {}
    if full:
        rope, nope, v, kv_rank = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        if c["q_lora_rank"] is None:
            linear(out, "q_proj", h, heads * (nope + rope))
        else:
            linear(out, "q_a_proj", h, c["q_lora_rank"], bias)
            out["q_a_layernorm"] = [c["q_lora_rank"]]
            linear(out, "q_b_proj", c["q_lora_rank"], heads * (nope + rope))
        linear(out, "kv_a_proj_with_mqa", h, kv_rank + rope, bias)
        out["kv_a_layernorm"] = [kv_rank]
        linear(out, "kv_b_proj", kv_rank, heads * (nope + v))
        linear(out, "o_proj", heads * v, h, bias)
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


def mlp_modules(c: dict, sparse: bool) -> Dict[str, List[int]]:
    """The MLP's modules (below mlp): a dense SwiGLU, or routed experts, their router and the shared experts."""
    h, out = c["hidden_size"], {}
    width, prefix = c["intermediate_size"], ""
    if sparse:
        experts, m = c["num_local_experts"], c["moe_intermediate_size"]
        out["experts"] = [experts * 2 * m * h, experts * h * m]
        out["gate"] = [experts * h]
        width, prefix = m * c["n_shared_experts"], "shared_experts."
    linear(out, prefix + "gate_proj", h, width)
    linear(out, prefix + "up_proj", h, width)
    linear(out, prefix + "down_proj", width, h)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head is never tied."""
    h, vocab = c["hidden_size"], c["vocab_size"]
    out = {"model.embed_tokens": [vocab * h], "model.norm": [h], "lm_head": [vocab * h]}
    for i in range(c["num_hidden_layers"]):
        at = f"model.layers.{i}."
        out.update({at + "self_attn." + k: v
                    for k, v in attention_modules(c, c["layer_types"][i] == "full_attention").items()})
        out.update({at + "mlp." + k: v for k, v in mlp_modules(c, c["mlp_layer_types"][i] == "sparse").items()})
        out[at + "input_layernorm"] = [h]
        out[at + "post_attention_layernorm"] = [h]
    return out


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: a field's value under either of its names (head_dim is overwritten with
    qk_rope_head_dim), else what the config.json set (any key becomes an attribute), else None."""
    name = {stored: k for k, stored in STORED_AS.items()}.get(name, name)
    if name == "head_dim":
        return c["qk_rope_head_dim"]
    if name in c:
        return c[name]
    value = c["raw"]
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
