"""NVIDIA's Dory (nGPT-style looped decoder), counted from its config as transformers 5.24 builds DoryForCausalLM.
Every layer holds the same tensors (the loop reuses the recurrent layers, it does not copy them), so the count needs
only the layer count; but that count is derived: released config.json files list each layer twice in `layer_types`
(an attention block, then an "mlp" block) with every layer count doubled, and the config class halves them on read
and doubles them again in to_dict. A shape template, which takes `num_hidden_layers` as the count, would count such
a file twice over. Besides its linears, each layer holds nGPT's learned scales (lambda_1/2, sqk, s_gate, suv_gate/up)
and the lm_head a per-token logit_scale; the L2 norms hold no weights.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    ROPE_KEYS,
    accepted_rope,
    attention,
    fits,
    gated_mlp,
    is_size,
    linear,
    odd_rotary,
    pad_fits,
    strict_values,
)

TYPES = ("dory",)
FIELDS = {  # configuration_dory.py: the default, and what @strict lets through (None only where annotated)
    "vocab_size": (131072, int), "hidden_size": (2560, int), "intermediate_size": (7168, int),
    "num_hidden_layers": (36, int), "num_attention_heads": (16, int), "num_key_value_heads": (4, int),
    "head_dim": (256, int), "hidden_act": ("silu", str), "max_position_embeddings": (8192, int),
    "initializer_range": (0.0177, float), "use_cache": (True, bool), "pad_token_id": (None, int, None),
    "bos_token_id": (None, int, None), "eos_token_id": (None, int, [int], None),
    "tie_word_embeddings": (False, bool), "rope_parameters": (None, dict, None), "attention_bias": (False, bool),
    "attention_dropout": (0.0, float), "mlp_bias": (False, bool), "sliding_window": (1024, int),
    "layer_types": (None, [str], None), "ngpt_alpha_init": (0.05, float), "n_input_layers": (8, int),
    "n_recurrent_layers": (None, int, None), "n_output_layers": (8, int), "n_recurrent_loops": (2, int),
    "recurrent_kv_cache_mode": ("per_loop", ("per_loop", "last_loop")),
}
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "head_dim")
ROPE_THETAS = {"sliding_attention": 10_000.0, "full_attention": 10_000_000.0}  # the only types it has defaults for


def plain_rope(rope, kinds: List[str]) -> bool:
    """Whether `rope_parameters` gives an accepted RoPE (accepted_rope) for exactly the layer types used, as to_dict
    writes it (its theta a float); other forms the meta device decides."""
    return rope is None or set(rope) == set(kinds) and all(
        accepted_rope(p, ROPE_KEYS[:2]) and fits(p.get("rope_theta", 0.0), float) for p in rope.values())


def settings(raw: dict) -> Optional[dict]:
    """The config after __post_init__ (its layer counts halved where `layer_types` lists "mlp" blocks); None where
    transformers refuses it, for a tied lm_head (below), and for RoPE or activations the meta device must check."""
    c = strict_values(raw, FIELDS)
    if c is None:
        return None
    kinds = c["layer_types"]
    if kinds is not None and "mlp" in kinds:  # each (attention, mlp) pair is one layer
        kinds = kinds[::2]
        for key in ("num_hidden_layers", "n_input_layers", "n_output_layers", "n_recurrent_layers"):
            c[key] = None if c[key] is None else c[key] // 2
    layers = c["num_hidden_layers"]
    if kinds is None:  # (an empty list stays empty, and is refused)
        kinds = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(layers)]
    if c["n_recurrent_layers"] is None:
        c["n_recurrent_layers"] = layers - c["n_input_layers"] - c["n_output_layers"]
    if (c["n_input_layers"] + c["n_recurrent_layers"] + c["n_output_layers"] != layers or c["n_recurrent_loops"] < 1
            or len(kinds) != layers or not set(kinds) <= set(ROPE_THETAS) or not all(is_size(c[k]) for k in SIZES)
            or not pad_fits(c["pad_token_id"], c["vocab_size"])):
        return None  # validate_architecture, validate_layer_type, a RoPE type with no default, nn.Embedding's assert
    if not plain_rope(c["rope_parameters"], kinds) or {"rope_scaling", "partial_rotary_factor"} & set(raw) \
            or not fits(raw.get("rope_theta", 0.0), float) or c["hidden_act"] not in ACTIVATIONS:
        return None
    if c["tie_word_embeddings"]:  # the tied lm_head still holds its logit_scale, which embedding_and_head would
        return None  # read as an untied head's weight: the meta device counts this one
    if odd_rotary(c["head_dim"]):
        return None  # validate_rope refuses an odd head rotated whole; rotated in part, the meta device decides
    return {**c, "layer_types": kinds, "raw": raw}


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters (the lm_head is untied: settings declines a tied one)."""
    h, vocab, f = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    hd, bias = c["head_dim"], c["attention_bias"]
    q = c["num_attention_heads"] * hd
    out = {"model.embed_tokens": [vocab * h]}
    for i in range(c["num_hidden_layers"]):
        at = f"model.layers.{i}"
        out[at] = [h, h]  # lambda_1, lambda_2
        out[f"{at}.self_attn"] = [q, q]  # sqk, s_gate
        attention(out, f"{at}.self_attn", h, c["num_attention_heads"], c["num_key_value_heads"], hd, bias)
        linear(out, f"{at}.self_attn.gate_proj", h, q)
        out[f"{at}.mlp"] = [f, f]  # suv_gate, suv_up
        gated_mlp(out, f"{at}.mlp", h, f, c["mlp_bias"])
    out["lm_head"] = [vocab * h, vocab]  # its weight, then logit_scale
    return out


def attribute(c: dict, name: str):
    """What the planner reads of the config: the layer count as the class holds it (halved); a key the class does
    not declare is set as given."""
    return c[name] if name in FIELDS else c["raw"].get(name)
