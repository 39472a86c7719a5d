"""dots3 Note's text model, counted from its config as transformers 5.24 builds it (Dots3NoteForCausalLM): no shape
template fits it, because a layer's attention sizes come from `per_layer_config`, an entry per layer index, and
which layers it names follows `layer_types` (by default the sliding-window layers, with the `swa_*` sizes), not a
count of layers. Only the attention reads a layer's entry; the MLP and norms read the global config. An
"indexed_attention" layer adds an indexer; `mlp_layer_types` picks an MoE block (routed and shared experts) or a
dense MLP. Both lists are derived where a config leaves them out: the layer types from `use_sliding_window` and
`use_dsa` (which also renames full to indexed attention, or back), the MLP types from `first_k_dense_replace` and
`moe_layer_freq`. transformers drops an entry's values equal to the global ones and refuses a layer type whose
layers differ after that, so each layer type has one attention size set.
"""
from typing import Dict, List, Optional

from trl_ds.plan.by_hand import (
    ACTIVATIONS,
    below,
    decoder,
    gated_mlp,
    indexer,
    is_size,
    latent_attention,
    linear,
    odd_rotary,
    pad_fits,
    routed_experts,
)

TYPES = ("dots3_note_text",)
SIZES = {  # configuration_dots3_note.py: int fields the count reads
    "vocab_size": 152064, "hidden_size": 5120, "intermediate_size": 13824, "moe_intermediate_size": 1536,
    "num_hidden_layers": 46, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8, "index_head_dim": 128,
    "index_n_heads": 64, "head_dim": 256, "shared_experts_intermediate_size": 1536,
}
OTHERS = {"q_lora_rank": 1024, "attention_bias": False, "tie_word_embeddings": False, "pad_token_id": 151659}
SWA = {"num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1024, "kv_lora_rank": 1024,
       "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}  # the sliding layers' entry: swa_* keys
ATTENTION = ("num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
             "qk_nope_head_dim", "v_head_dim", "head_dim", "attention_bias", "index_n_heads", "index_head_dim")
KINDS = ("sliding_attention", "indexed_attention", "full_attention")


def plain_rope(rope, kinds: set) -> bool:
    """Default RoPE, flat or nested with an entry for every layer type (the class fills in the rest)."""
    if rope is None:
        return True
    if not isinstance(rope, dict):
        return False
    nested = [k for k in rope if k in kinds]
    if nested and kinds - set(nested):
        return False
    return all(isinstance(e, dict) and e.get("rope_type", e.get("type", "default")) == "default"
               for e in ([rope[k] for k in nested] or [rope]))


def layer_kinds(raw: dict, layers: int) -> Optional[tuple]:
    """(layer_types, mlp_layer_types) as __post_init__ derives or rewrites them; None where it fails."""
    dense, freq = raw.get("first_k_dense_replace", 1), raw.get("moe_layer_freq", 1)
    mlp = raw.get("mlp_layer_types")
    if mlp is None:
        if type(dense) is not int or not (is_size(freq) or isinstance(freq, list) and len(freq) >= layers):
            return None
        mlp = ["sparse" if i >= dense and (bool(freq[i]) if isinstance(freq, list) else i % freq == 0) else "dense"
               for i in range(layers)]
    use_dsa = raw.get("use_dsa", None if "per_layer_config" in raw else True)
    kinds = raw.get("layer_types")
    if kinds is None:
        full = "full_attention" if use_dsa is False else "indexed_attention"
        windowed = raw.get("use_sliding_window", True)
        kinds = [full if not windowed or i < 2 or i % 4 == 1 else "sliding_attention" for i in range(layers)]
    if use_dsa is not None:
        old, new = ("indexed_attention", "full_attention") if not use_dsa else ("full_attention", "indexed_attention")
        kinds = [new if k == old else k for k in kinds]
    if not (isinstance(mlp, list) and len(mlp) == layers and set(mlp) <= {"sparse", "dense"}
            and isinstance(kinds, list) and len(kinds) == layers and set(kinds) <= set(KINDS)):
        return None
    return kinds, mlp


def entries(raw: dict, c: dict, kinds: list) -> Optional[dict]:
    """Layer index -> its per_layer_config entry less the values equal to the global ones; None where the class
    refuses the entries or they set what this count does not follow."""
    if "per_layer_config" in raw:
        given = raw["per_layer_config"]
    else:
        swa = {name: raw.get(f"swa_{name}", v) for name, v in SWA.items()}
        if "swa_qk_rope_head_dim" in raw:
            swa["qk_rope_head_dim"] = raw["swa_qk_rope_head_dim"]
        elif is_size(swa["head_dim"]) and is_size(swa["qk_nope_head_dim"]):
            swa["qk_rope_head_dim"] = swa["head_dim"] - swa["qk_nope_head_dim"]
        else:
            return None  # the class's subtraction fails
        given = {i: swa for i, kind in enumerate(kinds) if kind == "sliding_attention"}
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(isinstance(e, dict) and set(e) <= set(ATTENTION)
                                              for e in given.values()):
        return None
    try:
        given = {int(i): e for i, e in given.items()}
    except (TypeError, ValueError):
        return None
    if any(not 0 <= i < len(kinds) for i in given):
        return None
    kept = {i: {k: v for k, v in e.items() if v != c[k]} for i, e in given.items()}
    if any("index_head_dim" in e for e in kept.values()):  # validate_architecture reads it globally: a
        return None  # per-layer value makes that read raise (AmbiguousGlobalPerLayerAttributeError)
    return kept


def settings(raw: dict) -> Optional[dict]:
    """The config's values over the class defaults, with each layer type's attention sizes; None where transformers
    refuses the config (validate_architecture, a padding index outside the vocabulary) or the formulas do not follow
    it (an entry setting other keys than ATTENTION's, legacy layer type names, RoPE other than the default)."""
    c = {k: raw[k] if k in raw else v for k, v in {**SIZES, **OTHERS}.items()}
    if "num_local_experts" in raw:  # the attribute_map's alias wins over the field
        c["n_routed_experts"] = raw["num_local_experts"]
    c["shared_experts_intermediate_size"] = raw.get("moe_shared_expert_intermediate_size",
                                                    c["shared_experts_intermediate_size"])
    if not all(is_size(c[k]) for k in SIZES) or not (c["q_lora_rank"] is None or is_size(c["q_lora_rank"])) or not (
            isinstance(c["attention_bias"], bool)) or not isinstance(c["tie_word_embeddings"], bool) or not pad_fits(
            c["pad_token_id"], c["vocab_size"]):
        return None
    if raw.get("attention_chunk_size") is not None or raw.get("rope_scaling") is not None or raw.get(
            "hidden_act", "silu") not in ACTIVATIONS:
        return None  # prelu or xielu in an MLP holds a tensor
    found = layer_kinds(raw, c["num_hidden_layers"])
    if found is None or not plain_rope(raw.get("rope_parameters"), set(found[0])):
        return None
    kinds, mlp = found
    by_layer = entries(raw, c, kinds)
    if by_layer is None:
        return None
    attention = {}
    for kind in set(kinds):  # what validate_architecture reads: one entry per layer type, else it refuses
        held = {repr(sorted(by_layer.get(i, {}).items())) for i, k in enumerate(kinds) if k == kind}
        if len(held) > 1:
            return None
        a = {**{k: c[k] for k in ATTENTION}, **by_layer.get(kinds.index(kind), {})}
        sizes_ok = all(is_size(a[k]) for k in ATTENTION if k not in ("q_lora_rank", "attention_bias"))
        if not sizes_ok or not is_size(a["q_lora_rank"]) or not isinstance(a["attention_bias"], bool) or a[
                "num_key_value_heads"] != a["num_attention_heads"] or (
                kind == "indexed_attention" and a["qk_rope_head_dim"] > c["index_head_dim"]) or (
                kind == "sliding_attention" and a["head_dim"] != a["qk_nope_head_dim"] + a["qk_rope_head_dim"]):
            return None
        attention[kind] = a
    experts, groups = c["n_routed_experts"], c["n_group"]
    if experts % groups or experts // groups < 2 or not 1 <= c["topk_group"] <= groups:
        return None
    if "per_layer_config" in raw and raw["per_layer_config"] is None and odd_rotary(c["head_dim"]):
        return None  # homogeneous: RoPE may refuse an odd head_dim
    return {**c, "kinds": kinds, "mlp": mlp, "attention": attention}


def attention_modules(c: dict, kind: str) -> Dict[str, List[int]]:
    """Module name (below self_attn) -> numel of each tensor it holds directly: MLA with a low-rank query."""
    a, h = c["attention"][kind], c["hidden_size"]
    heads, q, rope = a["num_attention_heads"], a["q_lora_rank"], a["qk_rope_head_dim"]
    out: Dict[str, List[int]] = {}
    latent_attention(out, h, heads, q, a["kv_lora_rank"], a["qk_nope_head_dim"], rope, a["v_head_dim"],
                     a["attention_bias"])
    out["k_rope_only_layernorm"] = [rope]
    linear(out, "g_proj", h, heads)
    if kind == "indexed_attention":
        indexer(out, h, q, a["index_n_heads"], a["index_head_dim"])
    return out


def layer_modules(c: dict, i: int) -> Dict[str, List[int]]:
    """Module name (below model.layers.i) -> numel of each tensor it holds directly."""
    h = c["hidden_size"]
    out = below("self_attn", attention_modules(c, c["kinds"][i]))
    if c["mlp"][i] == "sparse":  # the router's score-correction bias is a buffer
        routed_experts(out, "mlp", h, c["n_routed_experts"], c["moe_intermediate_size"])
        gated_mlp(out, "mlp.shared_experts", h, c["shared_experts_intermediate_size"] * c["n_shared_experts"])
    else:
        gated_mlp(out, "mlp", h, c["intermediate_size"])
    return out


def modules(c: dict) -> Dict[str, List[int]]:
    """Every module of the causal LM that holds parameters; the lm_head only where it is not tied."""
    return decoder(c, layer_modules)


def attribute(c: dict, name: str):
    """What the planner reads of the config (the global values, not a layer's entry)."""
    return c.get({"num_local_experts": "n_routed_experts"}.get(name, name)) if name in (
        *SIZES, "num_local_experts", "tie_word_embeddings") else None
