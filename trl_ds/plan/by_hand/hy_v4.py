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

from trl_ds.plan.by_hand import linear, over_defaults

TYPES = ("hy_v4",)
DEFAULTS = {  # configuration_hy_v4.py: every size the model reads, and what the strict dataclass checks the type of
    "vocab_size": 120832, "hidden_size": 2816, "intermediate_size": 6912, "moe_intermediate_size": 768,
    "num_hidden_layers": 34, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 256,
    "tie_word_embeddings": False, "attention_bias": False, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "index_topk": 2048, "index_head_dim": 128,
    "index_n_heads": 16, "hc_mult": 4, "hidden_act": "silu",
}
PAD_TOKEN_ID = 120002  # the class default: outside a smaller vocabulary, nn.Embedding refuses it
ACTIVATIONS = ("silu", "swish", "gelu", "gelu_pytorch_tanh", "relu")  # some of ACT2FN's: others go to the meta device
ATTENTION_TYPES = (  # configuration_utils.ALLOWED_ATTN_LAYER_TYPES, which validate_layer_type holds layer_types to
    "full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention",
    "compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
    "hybrid_sliding", "linear_attention")
LEGACY = {"mamba": "linear_attention", "attention": "full_attention",  # remapped by PreTrainedConfig.__post_init__
          "deepseek_sparse_attention": "indexed_attention", "qwen_sparse_attention": "indexed_attention"}


def well_typed(raw: dict, defaults: dict, may_be_0: tuple) -> bool:
    """False where the strict dataclass refuses a value (another type than the default's, None included), where torch
    refuses a negative size, and for a 0 outside `may_be_0` (some modules divide by it: the meta device decides)."""
    return all(type(raw[k]) is type(v) and not (type(v) is int and raw[k] < (k not in may_be_0))
               for k, v in defaults.items() if k in raw)


def plain_rope(raw: dict) -> bool:
    """True for default RoPE; other types need keys transformers checks by type (the meta device decides)."""
    given = [raw[k] for k in ("rope_parameters", "rope_scaling") if raw.get(k) is not None]
    return type(raw.get("rope_theta", 1.0)) in (int, float) and all(
        isinstance(r, dict) and r.get("rope_type", r.get("type", "default")) == "default" and
        type(r.get("rope_theta", 1.0)) in (int, float) for r in given)


def listed(value, layers: int, kinds) -> bool:
    """What validate_layer_type accepts: a list of one of `kinds` per layer."""
    return isinstance(value, list) and len(value) == layers and all(isinstance(v, str) and v in kinds for v in value)


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with its lists derived as __post_init__ derives them; None for a
    config transformers refuses (a list of the wrong length or kinds, a pad token outside the vocabulary, a value of
    the wrong type) and for one these formulas leave to the meta device (RoPE other than default, an unusual
    activation)."""
    if not (well_typed(raw, DEFAULTS, ("num_hidden_layers", "n_routed_experts", "n_shared_experts")) and
            well_typed(raw, {"num_local_experts": 0}, ("num_local_experts",)) and plain_rope(raw) and
            raw.get("hidden_act", "silu") in ACTIVATIONS):
        return None
    c = over_defaults(raw, DEFAULTS)
    layers, vocab, pad = c["num_hidden_layers"], c["vocab_size"], raw.get("pad_token_id", PAD_TOKEN_ID)
    if "num_local_experts" in raw:  # set after the fields, through attribute_map: it wins over n_routed_experts
        c["n_routed_experts"] = raw["num_local_experts"]
    mlp = raw.get("mlp_layer_types")
    mlp = ["dense"] * min(1, layers) + ["sparse"] * max(layers - 1, 0) if mlp is None else mlp
    kinds = raw.get("layer_types")
    kinds = ["indexed_attention"] * layers if kinds is None else kinds
    indexers = raw.get("indexer_types")
    if indexers is None:
        indexers = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(layers)]
    if not (listed(mlp, layers, ("dense", "sparse")) and listed(kinds, layers, ATTENTION_TYPES + tuple(LEGACY)) and
            isinstance(indexers, list) and listed(indexers[:layers], layers, indexers) and  # any strings: the model
            (pad is None or type(pad) is int and -vocab <= pad < vocab)):  # reads the first, one a layer
        return None
    return {**c, "mlp_layer_types": mlp, "layer_types": [LEGACY.get(k, k) for k in kinds], "indexer_types": indexers,
            "raw": raw}


def attention_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i.self_attn) -> numel of each tensor it holds directly."""
    h, heads, bias = c["hidden_size"], c["num_attention_heads"], c["attention_bias"]
    q_rank, kv_rank, rope, v = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["v_head_dim"]
    out: Dict[str, List[int]] = {"": [heads]}  # the sinks
    linear(out, "q_a_proj", h, q_rank, bias)
    out["q_a_layernorm"] = [q_rank]
    linear(out, "q_b_proj", q_rank, heads * (c["qk_nope_head_dim"] + rope))
    linear(out, "kv_a_proj_with_mqa", h, kv_rank + rope, bias)
    out["kv_a_layernorm"] = [kv_rank]
    linear(out, "kv_b_proj", kv_rank, heads * (c["qk_nope_head_dim"] + v))
    linear(out, "o_proj", heads * v, h, bias)
    linear(out, "gate_proj", h, heads * v)
    if c["indexer_types"][i] != "shared":
        index_heads, index_dim = c["index_n_heads"], c["index_head_dim"]
        linear(out, "indexer.wq_b", q_rank, index_heads * index_dim)
        linear(out, "indexer.wk", h, index_dim)
        out["indexer.k_norm"] = [index_dim, index_dim]  # a LayerNorm: weight and bias
        linear(out, "indexer.weights_proj", h, index_heads)
    return out


def mlp_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i.mlp) -> numel of each tensor it holds directly."""
    h = c["hidden_size"]
    out: Dict[str, List[int]] = {}
    if c["mlp_layer_types"][i] == "sparse":
        experts, f = c["n_routed_experts"], c["moe_intermediate_size"]
        out["experts"] = [experts * 2 * f * h, experts * h * f]
        out["gate"] = [experts * h]  # the router; its score correction bias is a buffer
        prefix, width = "shared_experts.", f * c["n_shared_experts"]
    else:
        prefix, width = "", c["intermediate_size"]
    linear(out, prefix + "gate_proj", h, width)
    linear(out, prefix + "up_proj", h, width)
    linear(out, prefix + "down_proj", width, h)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    h, vocab, streams = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    out = {"model.embed_tokens": [vocab * h], "model.norm": [h],
           "model.hc_head": [streams * streams * h, streams, 1]}
    for i in range(c["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        for name, sizes in attention_modules(c, i).items():
            out[f"{layer}.self_attn" + (f".{name}" if name else "")] = sizes
        out.update({f"{layer}.mlp.{name}": sizes for name, sizes in mlp_modules(c, i).items()})
        out[f"{layer}.input_layernorm"] = out[f"{layer}.post_attention_layernorm"] = [h]
        for hc in ("attn_hc", "ffn_hc"):  # fn, base (pre and post gates for each stream) and their two scales
            out[f"{layer}.{hc}"] = [2 * streams * streams * h, 2 * streams, 2]
    if not c["tie_word_embeddings"]:
        out["lm_head"] = [vocab * h]
    return out


def attribute(c: dict, name: str):
    """What getattr(config, name) gives: __post_init__ sets head_dim to the rope slice and as many key/value heads
    as heads, num_local_experts maps to n_routed_experts, and any other key the config gives is an attribute."""
    derived = {"head_dim": c["qk_rope_head_dim"], "num_key_value_heads": c["num_attention_heads"],
               "num_local_experts": c["n_routed_experts"]}
    value = {**c["raw"], **c, **derived}
    for part in name.split("."):  # a dotted name reads into a dict the config gives
        value = value.get(part) if isinstance(value, dict) else None
    return value
