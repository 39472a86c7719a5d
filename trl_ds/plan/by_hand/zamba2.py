"""Zamba 2, counted from its config as transformers 5.24 builds it (Zamba2ForCausalLM): no shape template fits it,
because what a layer holds depends on its position. Every layer holds a Mamba 2 mixer; a "hybrid" layer of
`layers_block_type` (a 54-long list the class derives where a config leaves it out) also holds its own linear and a
shared transformer block (attention over 2 * hidden_size, a gated MLP). Hybrid layer k uses block k % num_mem_blocks,
and a block's LoRA adapters (the MLP's always, q/k/v's with use_shared_attention_adapter) are those of the hybrid
layers it serves, so how many it holds depends on the hybrid count. With tie_word_embeddings every block after the
first num_mem_blocks is tied to its earlier copy and holds nothing of its own; untied, each hybrid layer holds its
whole block.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import ACTIVATIONS, below, is_size, linear, odd_rotary, over_defaults, pad_fits

TYPES = ("zamba2",)
DEFAULTS = {  # configuration_zamba2.py
    "vocab_size": 32000, "hidden_size": 2560, "num_hidden_layers": 54, "mamba_d_state": 64, "mamba_d_conv": 4,
    "mamba_expand": 2, "mamba_ngroups": 1, "n_mamba_heads": 8, "num_attention_heads": 32, "num_mem_blocks": 1,
    "adapter_rank": 128, "add_bias_linear": False, "use_shared_attention_adapter": False, "tie_word_embeddings": True,
}
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "mamba_d_state", "mamba_d_conv", "mamba_expand",
         "mamba_ngroups", "n_mamba_heads", "num_attention_heads", "num_mem_blocks", "adapter_rank")
MAY_BE_NONE = ("intermediate_size", "num_key_value_heads", "pad_token_id")  # None: derived, or no padding row
KINDS = {"mamba": "linear_attention", "linear_attention": "linear_attention", "hybrid": "hybrid"}  # legacy remapped
DEFAULT_KINDS = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
                 + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)
ROPE = ({"rope_type", "type", "rope_theta"}, ("default",))  # the keys and type read here; any other: the meta device


def plain_rope(raw: dict) -> bool:
    """Rotary embeddings hold no tensors, but the config class validates them: only the default kind is read here."""
    given = [raw[k] for k in ("rope_parameters", "rope_scaling") if raw.get(k)]
    return "partial_rotary_factor" not in raw and all(
        isinstance(r, dict) and set(r) <= ROPE[0] and r.get("rope_type", r.get("type", "default")) in ROPE[1]
        for r in given)


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with the sizes __post_init__ derives; None wherever transformers
    refuses the config (a size given as None, layers_block_type and num_hidden_layers disagreeing, an odd head_dim
    the rotary check refuses, a padding index outside the vocabulary) or divides by zero building it; and for a layer
    kind other than mamba/hybrid (built as a mamba layer, a path not written out here) or an activation outside
    ACTIVATIONS (prelu's and xielu's hold tensors, an unknown name is refused)."""
    if (any(k in raw and raw[k] is None for k in DEFAULTS) or not plain_rope(raw)
            or raw.get("hidden_act", "gelu") not in ACTIVATIONS):
        return None
    c = {**over_defaults(raw, DEFAULTS), **{k: raw.get(k) for k in MAY_BE_NONE}}
    given = raw.get("layers_block_type")
    kinds = ([KINDS.get(k) if isinstance(k, str) else None for k in given] if isinstance(given, list)
             else DEFAULT_KINDS if given is None else [None])
    if (not all(is_size(c[k]) for k in SIZES) or None in kinds or len(kinds) != c["num_hidden_layers"]
            or any(not isinstance(c[k], bool) for k in ("add_bias_linear", "use_shared_attention_adapter",
                                                          "tie_word_embeddings"))
            or any(c[k] is not None and type(c[k]) is not int for k in MAY_BE_NONE)
            or (c["intermediate_size"] or 0) < 0):
        return None
    h, heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = 2 * h // heads
    kv = c["num_key_value_heads"] if c["num_key_value_heads"] is not None else heads
    if odd_rotary(head_dim) or not is_size(kv) or not pad_fits(c["pad_token_id"], c["vocab_size"]):
        return None
    return {**c, "kinds": kinds, "head_dim": head_dim, "num_key_value_heads": kv,
            "intermediate_size": c["intermediate_size"] or 4 * h,
            "hybrids": kinds.count("hybrid")}


def mamba_modules(c: dict) -> Dict[str, List[int]]:
    """A Mamba 2 mixer: module name (below its .mamba) -> numel of each tensor it holds directly."""
    h, heads, bias = c["hidden_size"], c["n_mamba_heads"], c["add_bias_linear"]
    inner = c["mamba_expand"] * h
    conv = inner + 2 * c["mamba_ngroups"] * c["mamba_d_state"]
    out = {"": [heads, heads, heads], "conv1d": [conv * c["mamba_d_conv"], conv], "norm": [inner]}  # conv bias always
    linear(out, "in_proj", h, inner + conv + heads, bias)
    linear(out, "out_proj", inner, h, bias)
    return out


def block_modules(c: dict, block: int) -> Dict[str, List[int]]:
    """Shared transformer block `block`: module name (below shared_transformer) -> numel of each tensor."""
    h, f, bias, rank = c["hidden_size"], c["intermediate_size"], c["add_bias_linear"], c["adapter_rank"]
    wide, q, kv = 2 * h, c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    out = {"input_layernorm": [wide], "pre_ff_layernorm": [h]}
    for name, fan_out in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        linear(out, f"self_attn.{name}", wide, fan_out)
    linear(out, "self_attn.o_proj", q, h)
    linear(out, "feed_forward.gate_up_proj", h, 2 * f, bias)
    linear(out, "feed_forward.down_proj", f, h, bias)
    for i in range(c["hybrids"]):  # an adapter per hybrid layer this block serves; Identity elsewhere
        if i % c["num_mem_blocks"] != block:
            continue
        linear(out, f"feed_forward.gate_up_proj_adapter_list.{i}.0", h, rank)
        linear(out, f"feed_forward.gate_up_proj_adapter_list.{i}.1", rank, 2 * f)
        if c["use_shared_attention_adapter"]:
            for name in ("q", "k", "v"):
                linear(out, f"self_attn.linear_{name}_adapter_list.{i}.0", wide, rank)
                linear(out, f"self_attn.linear_{name}_adapter_list.{i}.1", rank, wide)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h, vocab, blocks = c["hidden_size"], c["vocab_size"], c["num_mem_blocks"]
    out = {"model.embed_tokens": [vocab * h]}
    k = 0  # hybrid layers so far
    for i, kind in enumerate(c["kinds"]):
        layer = f"model.layers.{i}"
        if kind == "hybrid":
            linear(out, f"{layer}.linear", h, h)
            if k < blocks or not c["tie_word_embeddings"]:  # tied: a later block is its first copy's
                out.update(below(f"{layer}.shared_transformer", block_modules(c, k % blocks)))
            k, layer = k + 1, layer + ".mamba_decoder"
        out.update(below(f"{layer}.mamba", mamba_modules(c)))
        out[f"{layer}.input_layernorm"] = [h]
    out["model.final_layernorm"] = [h]
    if not c["tie_word_embeddings"]:
        out["lm_head"] = [vocab * h]
    return out


def attribute(c: dict, name: str):
    """What the planner reads of the config (head_dim is the derived attention_head_dim)."""
    if name in ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size",
                "num_key_value_heads", "head_dim", "tie_word_embeddings"):
        return c[name]
    return None
