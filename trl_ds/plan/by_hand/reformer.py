"""Reformer's causal LM, counted from its config as transformers 5.24 builds it (ReformerModelWithLMHead): no shape
template fits it, because which attention a layer holds depends on its place in `attn_layers` ("local": query, key
and value; "lsh": one shared query_key and value), the layer count is derived from that list (a config's own
`num_hidden_layers` overrides it), and the position embeddings are axial (one tensor per entry of
`axial_pos_embds_dim`, sized by the matching entry of `axial_pos_shape`) or a plain table. The reversible layers
feed a 2 * hidden_size final norm and lm_head, whose decoder holds a bias beside the head's own; the head is never
tied to the word embeddings (the class names no tied weights). The class defaults have is_decoder False, which the
causal LM refuses.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import ACTIVATIONS, below, is_size, linear, over_defaults

TYPES = ("reformer",)
EMBEDDING, LM_HEAD = "reformer.embeddings.word_embeddings", "lm_head.decoder"
DEFAULTS = {  # configuration_reformer.py
    "vocab_size": 320, "hidden_size": 256, "num_attention_heads": 12, "attention_head_size": 64,
    "feed_forward_size": 512, "max_position_embeddings": 4096, "local_num_chunks_after": 0,
    "local_attn_chunk_length": 64, "axial_pos_embds": True, "tie_word_embeddings": False,
}
LISTS = {"attn_layers": ["local", "lsh", "local", "lsh", "local", "lsh"], "axial_pos_shape": [64, 64],
         "axial_pos_embds_dim": [64, 192]}
MAY_BE_NONE = {"lsh_attn_chunk_length": 64, "lsh_num_chunks_after": 0}  # None is a value of their own here
KINDS = ("lsh", "local")


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults; None wherever transformers refuses the config (a key given as
    None where its type has no None, is_decoder not True, an attention kind other than KINDS, chunks after the
    current one) or fails building it (more layers than a mixed attn_layers names); and for an activation outside
    ACTIVATIONS (prelu's and xielu's hold tensors, an unknown name is refused)."""
    if raw.get("is_decoder") is not True or any(k in raw and raw[k] is None for k in {**DEFAULTS, **LISTS}):
        return None
    c = {**over_defaults(raw, {**DEFAULTS, **LISTS}), **{k: raw.get(k, v) for k, v in MAY_BE_NONE.items()}}
    kinds, shape, dims = c["attn_layers"], c["axial_pos_shape"], c["axial_pos_embds_dim"]
    if (not all(isinstance(v, (list, tuple)) for v in (kinds, shape, dims)) or not all(map(is_size, [*shape, *dims]))
            or not kinds or any(k not in KINDS for k in kinds)):
        return None
    layers = raw.get("num_hidden_layers", len(kinds))  # __post_init__ derives it; a config's own wins
    mixed = len(set(kinds)) > 1
    sizes = ("vocab_size", "hidden_size", "num_attention_heads", "attention_head_size", "feed_forward_size",
             "max_position_embeddings")
    if (not is_size(layers) or not all(is_size(c[k]) for k in sizes)
            or (mixed and layers > len(kinds)) or not isinstance(c["tie_word_embeddings"], bool)
            or raw.get("hidden_act", "relu") not in ACTIVATIONS
            or ("local" in kinds and c["local_num_chunks_after"] != 0)
            or ("lsh" in kinds and c["lsh_num_chunks_after"] != 0)):
        return None
    if c["axial_pos_embds"] is not False and (
            c["axial_pos_embds"] is not True or sum(dims) != c["hidden_size"] or len(dims) > len(shape)
            or (mixed and not is_size(c["lsh_attn_chunk_length"]))):  # the lcm of both chunk lengths
        return None
    # a single kind serves every layer, however many; a mixed list is read by position
    return {**c, "num_hidden_layers": layers, "kinds": [kinds[i] if mixed else kinds[0] for i in range(layers)]}


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below reformer.encoder.layers.i) -> numel of each tensor it holds directly."""
    h, f, width = c["hidden_size"], c["feed_forward_size"], c["num_attention_heads"] * c["attention_head_size"]
    out: Dict[str, List[int]] = {"attention.layer_norm": [h, h], "feed_forward.layer_norm": [h, h]}
    projections = ("query_key", "value") if c["kinds"][i] == "lsh" else ("query", "key", "value")
    for name in projections:
        linear(out, f"attention.self_attention.{name}", h, width)
    linear(out, "attention.output.dense", width, h)
    linear(out, "feed_forward.dense.dense", h, f, bias=True)
    linear(out, "feed_forward.output.dense", f, h, bias=True)
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters."""
    h, vocab = c["hidden_size"], c["vocab_size"]
    out = {EMBEDDING: [vocab * h]}
    if c["axial_pos_embds"]:  # weights[i] has shape[i] rows of dims[i] (the other axes 1)
        out["reformer.embeddings.position_embeddings.weights"] = [
            n * d for n, d in zip(c["axial_pos_shape"], c["axial_pos_embds_dim"])]
    else:
        out["reformer.embeddings.position_embeddings.embedding"] = [c["max_position_embeddings"] * h]
    for i in range(c["num_hidden_layers"]):
        out.update(below(f"reformer.encoder.layers.{i}", layer_modules(c, i)))
    out["reformer.encoder.layer_norm"] = [2 * h, 2 * h]  # over both reversible halves
    out["lm_head"] = [vocab]  # the head's own bias, beside its decoder's
    linear(out, LM_HEAD, 2 * h, vocab, bias=True)
    return out


def attribute(c: dict, name: str):
    """What the planner reads of the config: Reformer has no intermediate_size, kv heads or head_dim attribute."""
    if name in ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "tie_word_embeddings"):
        return c[name]
    return None
