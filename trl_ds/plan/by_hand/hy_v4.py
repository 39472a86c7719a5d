"""Hunyuan V4 (hy_v4), counted from its config as transformers 5.24 builds it (HYV4ForCausalLM): no shape template
fits it, because what a layer holds depends on its position in two lists the class derives where a config leaves
them out. `mlp_layer_types` makes a layer an MoE block ("sparse": routed experts, a router and shared experts
`n_shared_experts` wide) or a dense MLP; by default only layer 0 is dense. `indexer_types` gives a layer its own
sparse-attention indexer ("full") or lets it reuse an earlier one ("shared", no indexer); by default layer 0 and
every fourth from layer 1 (1, 5, 9, ...) are full, so 6 layers hold 3 indexers. The attention is MLA with a gate and
per-head sinks, and each layer holds two hyper-connections (`hc_mult` streams) besides its norms.
`layer_types` shapes nothing, but the class validates it.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    KNOWN_KINDS,
    LEGACY,
    accepted_rope_only,
    below,
    decoder,
    dotted,
    fits,
    gated_mlp,
    indexer,
    is_size,
    latent_attention,
    linear,
    listed,
    odd_rotary,
    pad_fits,
    routed_experts,
    strict_values,
)

TYPES = ("hy_v4",)
FIELDS = {  # configuration_hy_v4.py: every size the model reads, its default and the type @strict takes
    "vocab_size": (120832, int), "hidden_size": (2816, int), "intermediate_size": (6912, int),
    "moe_intermediate_size": (768, int), "num_hidden_layers": (34, int), "num_attention_heads": (32, int),
    "num_key_value_heads": (32, int), "head_dim": (256, int), "tie_word_embeddings": (False, bool),
    "attention_bias": (False, bool), "n_routed_experts": (256, int), "n_shared_experts": (1, int),
    "num_experts_per_tok": (8, int), "n_group": (1, int), "topk_group": (1, int), "q_lora_rank": (1536, int),
    "kv_lora_rank": (512, int), "qk_nope_head_dim": (192, int), "qk_rope_head_dim": (64, int),
    "v_head_dim": (256, int), "index_topk": (2048, int), "index_head_dim": (128, int), "index_n_heads": (16, int),
    "hc_mult": (4, int), "hidden_act": ("silu", str),
}
MAY_BE_0 = ("num_hidden_layers", "n_routed_experts", "n_shared_experts")  # a 0 elsewhere some module may divide by
PAD_TOKEN_ID = 120002  # the class default: outside a smaller vocabulary, nn.Embedding refuses it


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with its lists derived as __post_init__ derives them; None for a
    config transformers refuses (a list of the wrong length or kinds, a pad token outside the vocabulary, a wrong
    type in a field FIELDS checks, a negative size, an odd head rotated whole) and for one these formulas leave to
    the meta device (RoPE accepted_rope does not take, an unusual activation, a 0 some module divides by)."""
    c, experts = strict_values(raw, FIELDS), raw.get("num_local_experts", 0)
    if c is None or not all(is_size(v, k in MAY_BE_0) for k, v in c.items() if fits(v, int)):
        return None
    if not is_size(experts, may_be_0=True) or c["hidden_act"] not in ACTIVATIONS or not accepted_rope_only(raw):
        return None
    layers, vocab, pad = c["num_hidden_layers"], c["vocab_size"], raw.get("pad_token_id", PAD_TOKEN_ID)
    if "num_local_experts" in raw:  # set after the fields, through attribute_map: it wins over n_routed_experts
        c["n_routed_experts"] = experts
    mlp = raw.get("mlp_layer_types")
    mlp = ["dense"] * min(1, layers) + ["sparse"] * max(layers - 1, 0) if mlp is None else mlp
    kinds = raw.get("layer_types")
    kinds = ["indexed_attention"] * layers if kinds is None else kinds
    indexers = raw.get("indexer_types")
    if indexers is None:
        indexers = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(layers)]
    if not (listed(mlp, layers, ("dense", "sparse")) and listed(kinds, layers, KNOWN_KINDS) and
            fits(indexers, [str]) and len(indexers) >= layers and  # @strict's list[str]; the model reads one a
            pad_fits(pad, vocab)):  # layer from the first
        return None
    if odd_rotary(c["qk_rope_head_dim"]):
        return None  # validate_rope refuses an odd head rotated whole; rotated in part, the meta device decides
    return {**c, "mlp_layer_types": mlp, "layer_types": [LEGACY.get(k, k) for k in kinds], "indexer_types": indexers,
            "raw": raw}


def attention_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i.self_attn) -> numel of each tensor it holds directly."""
    h, heads, q_rank, v = c["hidden_size"], c["num_attention_heads"], c["q_lora_rank"], c["v_head_dim"]
    out: Dict[str, List[int]] = {"": [heads]}  # the sinks
    latent_attention(out, h, heads, q_rank, c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], v,
                     c["attention_bias"])
    linear(out, "gate_proj", h, heads * v)
    if c["indexer_types"][i] != "shared":
        indexer(out, h, q_rank, c["index_n_heads"], c["index_head_dim"])
    return out


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h, streams = c["hidden_size"], c["hc_mult"]
    out = below("self_attn", attention_modules(c, i))
    if c["mlp_layer_types"][i] == "sparse":  # the router's score correction bias is a buffer
        routed_experts(out, "mlp", h, c["n_routed_experts"], c["moe_intermediate_size"])
        gated_mlp(out, "mlp.shared_experts", h, c["moe_intermediate_size"] * c["n_shared_experts"])
    else:
        gated_mlp(out, "mlp", h, c["intermediate_size"])
    for hc in ("attn_hc", "ffn_hc"):  # fn, base (pre and post gates for each stream) and their two scales
        out[hc] = [2 * streams * streams * h, 2 * streams, 2]
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h, streams = c["hidden_size"], c["hc_mult"]
    return decoder(c, layer_modules, {"model.hc_head": [streams * streams * h, streams, 1]})


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: __post_init__ sets head_dim to the rope slice and as many key/value heads
    as heads, num_local_experts maps to n_routed_experts, and any other key the config gives is an attribute."""
    derived = {"head_dim": c["qk_rope_head_dim"], "num_key_value_heads": c["num_attention_heads"],
               "num_local_experts": c["n_routed_experts"]}
    return dotted({**c["raw"], **c, **derived}, name)
