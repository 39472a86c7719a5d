"""The GPT-style families params.py counts from their config, as transformers 5 writes them: gpt2 (Conv1D with
biases, learned position embeddings), gpt_neox (fused QKV, LayerNorms, biased MLP) and falcon (fused QKV whose width
follows multi_query / new_decoder_architecture, one switch for every bias, one or two LayerNorms per layer).
GPT-2's config.json names the dimensions its own way (n_embd, n_layer, n_head); `standard_keys` gives params.py the
names the other families use. (Falcon's older n_head / n_layer are no longer read by transformers 5: its
FalconConfig has no attribute_map, so such a config falls back to the meta device, which builds what transformers
builds.) tests/unit/test_model_families.py holds each to a meta-device count.
"""
from typing import Tuple

GPT_TYPES = ("gpt2", "gpt_neox", "falcon")
# config.json name -> the name params.py reads (each family's attribute_map in transformers)
ALIASES = {
    "gpt2": {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings"},
}
GPT_DEFAULTS = {  # transformers' defaults for keys a config.json may leave out (configuration_<family>.py)
    "gpt2": {"tie_word_embeddings": True, "max_position_embeddings": 1024},
    "gpt_neox": {"attention_bias": True},
    "falcon": {"tie_word_embeddings": True, "multi_query": True, "parallel_attn": True, "bias": False,
               "new_decoder_architecture": False},
}


def standard_keys(raw: dict) -> dict:
    """The config with the dimensions under the common names: the MLP width and the key/value heads included."""
    t = raw.get("model_type")
    if t not in GPT_TYPES:
        return raw
    out = {ALIASES.get(t, {}).get(k, k): v for k, v in raw.items()}
    h, heads = out.get("hidden_size"), out.get("num_attention_heads")
    if t == "gpt2" and h:
        out["intermediate_size"] = out.get("n_inner") or 4 * h
    elif t == "falcon" and h and heads:
        out["intermediate_size"] = out.get("ffn_hidden_size") or 4 * h
        out["num_key_value_heads"] = falcon_kv_heads(out)
    return out


def falcon_kv_heads(raw: dict) -> int:
    if raw.get("new_decoder_architecture", False):
        return raw.get("num_kv_heads") or raw["num_attention_heads"]
    return 1 if raw.get("multi_query", True) else raw["num_attention_heads"]


def extra_embeddings(raw: dict, width: int) -> list:
    """GPT-2's learned position embeddings: one module of n_positions x n_embd."""
    if raw["model_type"] == "gpt2":
        return [[raw.get("n_positions", GPT_DEFAULTS["gpt2"]["max_position_embeddings"]) * width]]
    return []


def gpt_layer(m, raw: dict, a) -> None:
    """One decoder layer's modules and the numel of the tensors each holds."""
    h, f, t = a.hidden_size, a.intermediate_size, a.model_type
    layer_norm = [h, h]
    if t == "gpt2":
        m.tensors["ln_1"] = layer_norm
        m.linear("attn.c_attn", h, 3 * h, True)
        m.linear("attn.c_proj", h, h, True)
        m.tensors["ln_2"] = layer_norm
        m.linear("mlp.c_fc", h, f, True)
        m.linear("mlp.c_proj", f, h, True)
    elif t == "gpt_neox":
        bias = bool(raw.get("attention_bias", True))
        m.tensors.update(input_layernorm=layer_norm, post_attention_layernorm=layer_norm)
        m.linear("attention.query_key_value", h, 3 * h, bias)
        m.linear("attention.dense", h, h, bias)
        m.linear("mlp.dense_h_to_4h", h, f, True)
        m.linear("mlp.dense_4h_to_h", f, h, True)
    else:
        falcon_layer(m, raw, a, layer_norm)


def falcon_layer(m, raw: dict, a, layer_norm: list) -> None:
    h, f, hd, bias = a.hidden_size, a.intermediate_size, a.head_dim, bool(raw.get("bias", False))
    m.linear("self_attention.query_key_value", h, (a.num_attention_heads + 2 * a.num_key_value_heads) * hd, bias)
    m.linear("self_attention.dense", h, h, bias)
    m.linear("mlp.dense_h_to_4h", h, f, bias)
    m.linear("mlp.dense_4h_to_h", f, h, bias)
    for name in falcon_norms(raw):
        m.tensors[name] = layer_norm


def falcon_norms(raw: dict) -> Tuple[str, ...]:
    """input_layernorm (and post_attention_layernorm unless attention and MLP run in parallel); the new decoder
    architecture's two parallel norms by default (num_ln_in_parallel_attn)."""
    if not raw.get("parallel_attn", True):
        return ("input_layernorm", "post_attention_layernorm")
    parallel = raw.get("num_ln_in_parallel_attn") or (2 if raw.get("new_decoder_architecture") else 1)
    return ("ln_attn", "ln_mlp") if parallel == 2 else ("input_layernorm",)
