"""Gemma 4's text models, counted from their config as transformers 5.24 builds them (Gemma4ForCausalLM,
Gemma4UnifiedForCausalLM): no shape template fits them, because which tensors a layer holds depends on its
position, not on how many layers of a kind there are. A layer's attention takes its head_dim and key/value heads from
`per_layer_config` where it has an entry (the full-attention layers': `global_head_dim`, and
`num_global_key_value_heads` with `attention_k_eq_v`, in a config.json that gives no per_layer_config); the last
`num_kv_shared_layers` layers reuse an earlier layer's keys and values, so they hold no k/v projections or norms,
and an MLP twice as wide with `use_double_wide_mlp`; a full-attention layer with `attention_k_eq_v` has no v_proj.
gemma4_text adds per-layer input embeddings (`hidden_size_per_layer_input`) and an MoE block beside the MLP
(`enable_moe_block`). tests/unit/test_by_hand_gemma4.py holds each variant to a meta-device count.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import ACTIVATIONS, decoder, gated_mlp, is_size, linear, over_defaults, pad_fits

TYPES = ("gemma4_text", "gemma4_unified_text")
DEFAULTS = {  # configuration_gemma4.py, configuration_gemma4_unified.py
    "vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
    "attention_bias": False, "attention_k_eq_v": False, "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
    "global_head_dim": 512, "num_global_key_value_heads": None,
}
TEXT_ONLY = {"vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256, "enable_moe_block": False,
             "num_experts": None, "top_k_experts": None, "moe_intermediate_size": None}
OVERRIDES = ("head_dim", "num_key_value_heads")  # what a layer's per_layer_config entry may set


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults (the unified text model has no per-layer inputs or MoE block);
    None where a per-layer entry sets something other than OVERRIDES, and where transformers refuses the config or
    the formulas were not written for it (see sound())."""
    own = {**DEFAULTS, **(TEXT_ONLY if raw["model_type"] == "gemma4_text" else {})}
    c = over_defaults(raw, own)
    c["hidden_size_per_layer_input"] = c.get("hidden_size_per_layer_input") or 0
    c["enable_moe_block"] = bool(c.get("enable_moe_block"))
    if not sound(raw, c):
        return None
    layers = c["num_hidden_layers"]
    given = raw.get("layer_types")
    kinds = list(given) if given is not None else [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if len(kinds) != layers:
        return None  # validate_layer_type refuses it
    kinds[-1] = "full_attention"  # the class forces the last layer to full attention
    if "per_layer_config" in raw:
        entries = {int(i): dict(e) for i, e in (raw["per_layer_config"] or {}).items()}
    else:
        entry = {"head_dim": c["global_head_dim"]}
        if c["attention_k_eq_v"] and c["num_global_key_value_heads"] is not None:
            entry["num_key_value_heads"] = c["num_global_key_value_heads"]
        entries = {i: entry for i, kind in enumerate(kinds) if kind == "full_attention"}
    if any(set(e) - set(OVERRIDES) for e in entries.values()) or any(
            len({repr(sorted(entries.get(i, {}).items())) for i, k in enumerate(kinds) if k == kind}) > 1
            for kind in set(kinds)):  # layers of one kind with different overrides: transformers refuses them
        return None
    first_shared = layers - c["num_kv_shared_layers"]
    if 0 < first_shared and set(kinds[:first_shared]) != set(kinds):  # transformers refuses it: the meta path says so
        return None
    return {**c, "kinds": kinds, "entries": entries, "first_shared": first_shared}


def sound(raw: dict, c: dict) -> bool:
    """Sizes that build, an MoE block with its sizes, a per_layer_config of entries by layer index, KV sharing over
    at most every layer (more makes transformers keep k/v in layers counted from the end), a layer_types list, an
    activation that holds no tensor (ACTIVATIONS) and a pad token inside the vocabulary."""
    sizes = [c[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim", "global_head_dim")]
    if c["enable_moe_block"]:
        sizes += [c["num_experts"], c["top_k_experts"], c["moe_intermediate_size"]]
    if c["hidden_size_per_layer_input"]:
        sizes += [c["vocab_size_per_layer_input"]]
    entries = raw.get("per_layer_config") or {}
    kinds = raw.get("layer_types")
    return all(is_size(n) for n in sizes) and is_size(c["hidden_size_per_layer_input"], may_be_0=True) and \
        is_size(c["num_kv_shared_layers"], may_be_0=True) and c["num_kv_shared_layers"] <= c["num_hidden_layers"] \
        and isinstance(entries, dict) and all(str(i).isdigit() and isinstance(e, dict) for i, e in entries.items()) \
        and (kinds is None or isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)) \
        and raw.get("hidden_activation", "gelu_pytorch_tanh") in ACTIVATIONS \
        and pad_fits(raw.get("pad_token_id", 0), c["vocab_size"])


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, heads, bias = c["hidden_size"], c["num_attention_heads"], c["attention_bias"]
    entry = c["entries"].get(i, {})
    hd, kv = entry.get("head_dim", c["head_dim"]), entry.get("num_key_value_heads", c["num_key_value_heads"])
    shared = i >= c["first_shared"]
    out: Dict[str, List[int]] = {}

    linear(out, "self_attn.q_proj", h, heads * hd, bias)
    out["self_attn.q_norm"] = [hd]
    if not shared:
        out["self_attn.k_norm"] = [hd]  # v_norm has no scale
        linear(out, "self_attn.k_proj", h, kv * hd, bias)
        if not (c["attention_k_eq_v"] and c["kinds"][i] != "sliding_attention"):
            linear(out, "self_attn.v_proj", h, kv * hd, bias)
    linear(out, "self_attn.o_proj", heads * hd, h, bias)
    width = c["intermediate_size"] * (2 if c["use_double_wide_mlp"] and shared else 1)
    gated_mlp(out, "mlp", h, width)
    norms = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
    if c["hidden_size_per_layer_input"]:
        p = c["hidden_size_per_layer_input"]
        linear(out, "per_layer_input_gate", h, p)
        linear(out, "per_layer_projection", p, h)
        norms.append("post_per_layer_input_norm")
    if c["enable_moe_block"]:
        experts, f = c["num_experts"], c["moe_intermediate_size"]
        out["router"] = [h, experts]  # its scale and per-expert scale; its norm has no scale
        linear(out, "router.proj", h, experts)
        out["experts"] = [experts * 2 * f * h, experts * h * f]
        norms += ["post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"]
    for name in norms:
        out[name] = [h]
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h, layers, p = c["hidden_size"], c["num_hidden_layers"], c["hidden_size_per_layer_input"]
    per_layer = {"model.embed_tokens_per_layer": [c["vocab_size_per_layer_input"] * layers * p],
                 "model.per_layer_model_projection": [h * layers * p],
                 "model.per_layer_projection_norm": [p]} if p else None
    return decoder(c, layer_modules, per_layer, norms=())  # layer_modules holds the layers' norms


def attribute(c: dict, name: str):
    """What the planner reads of the config (the experts one token passes through are top_k_experts)."""
    return c.get({"num_experts_per_tok": "top_k_experts"}.get(name, name))
