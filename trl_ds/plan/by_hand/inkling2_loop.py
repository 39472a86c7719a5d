"""Inkling 2 Loop's text model, counted from its config as transformers 5.24 builds it (Inkling2LoopForCausalLM): no
shape template fits it, because which tensors a layer holds depends on its position and on its entry in
`layer_types`, not on how many layers of a kind there are. A "hybrid_sliding" layer takes the `swa_*` heads and a
relative-bias bank `sliding_window_size` wide, any other kind the full-attention heads, dynamic k/v convolutions
(static taps and a weight projection), three q/k/v input norms and a bias bank `rel_extent` wide. Layer 0 has no
attention-input residual query; a full-attention layer's has three. The layers from `loop_layer_index_start` to
`loop_layer_index_end` (`loop_config`'s values win where given) hold four message gates each, and the model one
message query per looped layer, however many of those layers exist. `layer_types` is derived where a config leaves
it out (every sixth layer "hybrid"). The lm_head is `unpadded_vocab_size` wide and never tied.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    LAYER_TYPES,
    LEGACY,
    below,
    decoder,
    is_size,
    linear,
    listed,
    pad_fits,
    routed_experts,
)

TYPES = ("inkling2_loop_text",)
DEFAULTS = {  # configuration_inkling2_loop.py
    "vocab_size": 201024, "unpadded_vocab_size": 200058, "hidden_size": 2304, "num_hidden_layers": 24,
    "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "swa_num_attention_heads": 24,
    "swa_num_key_value_heads": 8, "swa_head_dim": 128, "sliding_window_size": 1024, "d_rel": 16, "rel_extent": 1024,
    "conv_kernel_size": 4, "moe_intermediate_size": 1152, "n_routed_experts": 128, "num_experts_per_tok": 8,
    "n_layers_per_attn_res_block": 6, "loop_layer_index_start": 6, "loop_layer_index_end": 18, "loop_num_passes": 3,
    "loop_gate_rank": 64,
}
ALIASES = {  # the class's attribute_map: an alias given in the config wins over the field it names
    "sliding_window": "sliding_window_size", "num_local_experts": "n_routed_experts",
    "sconv_kernel_size": "conv_kernel_size", "intermediate_size": "moe_intermediate_size",
}
KINDS = LAYER_TYPES + tuple(LEGACY)  # what validate_layer_type takes, legacy names remapped
LOOP_CONFIG = {"core_start": "loop_layer_index_start", "core_end": "loop_layer_index_end",
               "num_passes": "loop_num_passes", "gate_rank": "loop_gate_rank"}


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults; None where transformers refuses the config or fails building it
    (a size that is no positive int, a loop range the class rejects, a loop ending before it starts), and for a
    per_layer_config, which the modeling code never reads but which makes the config's reads ambiguous."""
    c = {k: raw[k] if k in raw else v for k, v in DEFAULTS.items()}
    c.update({field: raw[alias] for alias, field in ALIASES.items() if alias in raw})
    loop = raw.get("loop_config")
    if loop is not None:
        if not isinstance(loop, dict):
            return None
        c.update({field: loop[key] for key, field in LOOP_CONFIG.items() if key in loop})
    if raw.get("per_layer_config") or not all(map(is_size, c.values())):
        return None
    layers, block = c["num_hidden_layers"], c["n_layers_per_attn_res_block"]
    start, end = c["loop_layer_index_start"], c["loop_layer_index_end"]
    if c["loop_num_passes"] < 1 or start <= 0 or block < 1 or start % block or end % block or end < start:
        return None
    kinds = raw.get("layer_types")
    if kinds is None:
        kinds = ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(layers)]
    if not listed(kinds, layers, KINDS) or not pad_fits(raw.get("pad_token_id"), c["vocab_size"]) or not {
            raw.get("hidden_act", "silu"), raw.get("scoring_func", "sigmoid")} <= set(ACTIVATIONS):
        return None  # prelu or xielu (as an MLP's or the router's function) holds a tensor
    return {**c, "sliding": [k == "hybrid_sliding" for k in kinds],
            "tie_word_embeddings": raw.get("tie_word_embeddings")}


def attention_modules(c: dict, sliding: bool) -> Dict[str, List[int]]:
    """Module name (below self_attn) -> numel of each tensor it holds directly."""
    h, rel, k = c["hidden_size"], c["d_rel"], c["conv_kernel_size"]
    pre = "swa_" if sliding else ""
    heads, kv, hd = c[pre + "num_attention_heads"], c[pre + "num_key_value_heads"], c[pre + "head_dim"]
    out: Dict[str, List[int]] = {}
    linear(out, "q_proj.linear", h, heads * hd)
    out["q_proj.norm"] = [heads * hd]  # a learned scale before the L2 clip
    for name in ("k_proj", "v_proj"):
        linear(out, f"{name}.linear", h, kv * hd)
        if sliding:  # a depthwise conv
            out[f"{name}.sconv.conv1d"] = [kv * hd * k]
        else:  # static taps plus taps projected from the input, per head
            out[f"{name}.sconv"] = [k * kv * hd]
            linear(out, f"{name}.sconv.weight_proj", h, kv * k)
    linear(out, "o_proj.gate_proj", h, heads * hd)
    linear(out, "o_proj.linear", heads * hd, h)
    linear(out, "sink_proj", h, heads)
    linear(out, "relative_position_bias.linear", h, heads * rel)
    out["relative_position_bias.norm"] = [heads * rel]
    out["relative_position_bias"] = [rel * (c["sliding_window_size"] if sliding else c["rel_extent"])]
    return out


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, sliding = c["hidden_size"], c["sliding"][i]
    out = below("self_attn", attention_modules(c, sliding))
    if i > 0:  # layer 0 reads the embedding itself
        out["attention_input"] = [h if sliding else 3 * h]  # full attention: a query each for q, k and v
    out["mlp_input"] = [h]
    routed_experts(out, "mlp", h, c["n_routed_experts"], c["moe_intermediate_size"])  # score-correction bias: a buffer
    norms = ["input_layernorm"] if sliding else ["q_input_layernorm", "k_input_layernorm", "v_input_layernorm"]
    for name in norms + ["post_attention_layernorm"]:
        out[name] = [h]
    for name in ("post_attention_convolution", "post_mlp_convolution"):
        out[f"{name}.conv1d"] = [h * c["conv_kernel_size"]]
    if c["loop_layer_index_start"] <= i < c["loop_layer_index_end"]:
        r = c["loop_gate_rank"]
        for gate in ("q", "k", "v", "mlp"):
            linear(out, f"{gate}_message_gate.down_proj", 2 * h, r)
            linear(out, f"{gate}_message_gate.forget_gate_proj", r, h)
            linear(out, f"{gate}_message_gate.message_gate_proj", r, h)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters."""
    h = c["hidden_size"]
    extra = {"model.embed_tokens.embed_norm": [h], "model.final_input": [h],
             # a query per message (q, k, v, MLP) of each looped layer, counted from the range as given
             "model.message_input": [(c["loop_layer_index_end"] - c["loop_layer_index_start"]) * 4 * h]}
    # the lm_head: unpadded_vocab_size wide, never tied (the checkpoints keep it apart); layer_modules holds the norms
    return decoder(c, layer_modules, extra, lm_head=[h * c["unpadded_vocab_size"]], norms=())


def attribute(c: dict, name: str):
    """What the planner reads of the config, through the class's attribute_map."""
    name = ALIASES.get(name, name)
    return c[name] if name in (*DEFAULTS, "tie_word_embeddings") else None
