"""Bytes each decoder layer saves for backward, per model family (scripts/study/measure_activations.py).

A layer saves `tokens · Σ c·x + Σ k·y` bytes: x per-token features of its dimensions (hidden h, MLP width f, q =
heads × head_dim, ...), y per-layer ones (Gemma's fp32 norm weights, grouped_mm's expert offsets). The coefficients
are exact integer fits per family, kind of layer (dense, moe, sliding) and parameter width (2 or 4), for
transformers' default attention (SDPA, causal, no padding; Gemma-2's eager saves the a·s² scores) and experts
implementation, no dropout; tests/unit/plan/test_family_activations.py re-measures them. A family not in
COEFFICIENTS is charged Llama's: the planner says so.
"""
from typing import Dict, List, Tuple

from trl_ds.plan.params import MLA_TYPES, Architecture, config_dict, expert_width, get, is_moe_layer, shared_width

SLIDING_TYPES = ("gemma2", "gemma3_text")
# transformers' layer_types defaults: every other layer (Gemma-2), five of every six (Gemma-3)
SLIDING_PATTERN = {"gemma2": 2, "gemma3_text": 6}
SLIDING_DEFAULT = 4096  # both configs' sliding_window default

_T, _L = "token", "layer"


def _c(token: Dict[str, int], layer: Dict[str, int] = None) -> Dict[str, Dict[str, int]]:
    return {_T: token, _L: layer or {}}


# Measured by scripts/study/measure_activations.py (--json); COEFFICIENTS[model_type][kind][width]: bytes per token
# ("token") and per layer ("layer") for each feature of `features`.
LLAMA = {2: _c({"h": 16, "f": 8, "q": 4, "kv": 4, "heads": 4, "one": 8}),
         4: _c({"h": 24, "f": 16, "q": 8, "kv": 8, "heads": 4, "one": 8})}
GEMMA2 = {w: _c({"h": h, "one": 16, "heads_x_seq": 8, "q": 2 * w, "kv_bmm": 2 * w, "f": 4 * w}, {"layer_h": 16})
          for w, h in ((2, 36), (4, 40))}
GEMMA3_LAYER = {"layer_h": 16, "layer_head_dim": 8}
COEFFICIENTS: Dict[str, Dict[str, Dict[int, dict]]] = {
    "llama": {"dense": LLAMA}, "mistral": {"dense": LLAMA}, "qwen2": {"dense": LLAMA},
    "qwen3": {"dense": {2: _c({"h": 16, "heads": 8, "one": 8, "q": 10, "kv": 10, "kv_heads": 4, "f": 8}),
                        4: _c({"h": 24, "heads": 8, "one": 8, "q": 16, "kv": 16, "kv_heads": 4, "f": 16})}},
    "gemma": {"dense": {2: _c({"h": 20, "heads": 4, "one": 8, "q": 4, "kv": 4, "f": 8}, {"layer_h": 8}),
                        4: _c({"h": 24, "heads": 4, "one": 8, "q": 8, "kv": 8, "f": 16}, {"layer_h": 8})}},
    "gemma2": {"dense": GEMMA2, "dense_sliding": GEMMA2},
    "gemma3_text": {
        "dense": {2: _c({"h": 36, "heads": 8, "one": 16, "q": 12, "kv": 12, "kv_heads": 4, "f": 8}, GEMMA3_LAYER),
                  4: _c({"h": 40, "heads": 8, "one": 16, "q": 16, "kv": 16, "kv_heads": 4, "f": 16}, GEMMA3_LAYER)},
        "dense_sliding": {
            2: _c({"h": 36, "heads": 8, "one": 16, "seq": 2, "q": 12, "kv": 12, "kv_repeated": 4, "kv_heads": 4,
                   "f": 8}, GEMMA3_LAYER),
            4: _c({"h": 40, "heads": 8, "one": 16, "seq": 4, "q": 16, "kv": 16, "kv_repeated": 8, "kv_heads": 4,
                   "f": 16}, GEMMA3_LAYER)},
    },
    "phi3": {"dense": {2: _c({"h": 16, "heads": 4, "one": 8, "q": 8, "kv": 6, "f": 8}),
                       4: _c({"h": 24, "heads": 4, "one": 8, "q": 16, "kv": 12, "f": 16})}},
    "olmo2": {"dense": {2: _c({"h": 20, "heads": 4, "one": 16, "q": 12, "kv": 12, "f": 8}),
                        4: _c({"h": 24, "heads": 4, "one": 16, "q": 16, "kv": 16, "f": 16})}},
    "mixtral": {"moe": {
        2: _c({"h": 16, "heads": 4, "one": 12, "q": 4, "kv": 4, "routed": 8, "k_x_h": 4, "experts": 4, "k": 40},
              {"layer_experts": 4}),
        4: _c({"h": 24, "heads": 4, "one": 12, "q": 8, "kv": 8, "routed": 16, "k_x_h": 8, "experts": 4, "k": 40},
              {"layer_experts": 4})}},
    "qwen2_moe": {"moe": {
        2: _c({"h": 18, "heads": 4, "one": 10, "q": 4, "kv": 4, "routed": 8, "shared": 8, "k_x_h": 4, "experts": 4,
               "k": 34}, {"layer_experts": 4}),
        4: _c({"h": 28, "heads": 4, "one": 12, "q": 8, "kv": 8, "routed": 16, "shared": 16, "k_x_h": 8, "experts": 4,
               "k": 36}, {"layer_experts": 4})}},
    "qwen3_moe": {"moe": {
        2: _c({"h": 16, "heads": 8, "one": 8, "q": 10, "kv": 10, "kv_heads": 4, "routed": 8, "k_x_h": 4, "experts": 4,
               "k": 34}, {"layer_experts": 4}),
        4: _c({"h": 24, "heads": 8, "one": 8, "q": 16, "kv": 16, "kv_heads": 4, "routed": 16, "k_x_h": 8,
               "experts": 4, "k": 36}, {"layer_experts": 4})}},
    "deepseek_v3": {
        "dense": {
            2: _c({"h": 16, "heads": 4, "one": 16, "q_rank": 8, "q_direct": -4, "kv_rank": 8, "heads_x_nope": 12,
                   "heads_x_rope": 10, "f": 8}),
            4: _c({"h": 24, "heads": 4, "one": 16, "q_rank": 12, "q_direct": -4, "kv_rank": 12, "heads_x_nope": 24,
                   "heads_x_rope": 20, "rope": 4, "f": 16})},
        "moe": {
            2: _c({"h": 20, "heads": 4, "one": 20, "q_rank": 8, "q_direct": -4, "kv_rank": 8, "heads_x_nope": 12,
                   "heads_x_rope": 10, "routed": 8, "shared": 8, "k_x_h": 4, "experts": 4, "k": 40},
                  {"layer_experts": 4, "layer_experts_x_h": 4}),
            4: _c({"h": 24, "heads": 4, "one": 20, "q_rank": 12, "q_direct": -4, "kv_rank": 12, "heads_x_nope": 24,
                   "heads_x_rope": 20, "rope": 4, "routed": 16, "shared": 16, "k_x_h": 8, "experts": 4, "k": 40},
                  {"layer_experts": 4})},
    },
}


def measured(model_type: str) -> bool:
    return model_type in COEFFICIENTS


def layer_types(arch: Architecture, raw: dict) -> List[bool]:
    """Per layer: whether it is a sliding-window layer (Gemma-2, Gemma-3)."""
    if arch.model_type not in SLIDING_TYPES:
        return [False] * arch.num_hidden_layers
    if raw.get("layer_types"):
        return [t == "sliding_attention" for t in raw["layer_types"]]
    pattern = raw.get("sliding_window_pattern") or SLIDING_PATTERN[arch.model_type]
    return [bool((i + 1) % pattern) for i in range(arch.num_hidden_layers)]


def layer_kinds(arch: Architecture, seq: int) -> List[str]:
    """dense or moe, plus _sliding where the layer's sliding-window mask reaches attention: Gemma-3 (SDPA) only when
    the sequence is longer than the window (shorter ones run the plain causal kernel); Gemma-2 (eager) always."""
    raw = config_dict(arch)
    window = raw.get("sliding_window") or SLIDING_DEFAULT
    masked = arch.model_type == "gemma2" or seq > window
    return [("moe" if arch.is_moe and is_moe_layer(raw, i) else "dense") + ("_sliding" if sliding and masked else "")
            for i, sliding in enumerate(layer_types(arch, raw))]


def features(arch: Architecture, seq: int, kind: str, batch: int = 2) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Per-token and per-layer features of one layer of `kind`, for micro-batches of `batch` sequences of `seq`."""
    raw, h, a = config_dict(arch), arch.hidden_size, arch.num_attention_heads
    token = {"h": h, "heads": a, "one": 1, "seq": seq, "heads_x_seq": a * seq}
    layer = {"layer_h": h, "layer_head_dim": arch.head_dim, "layer_one": 1}
    if arch.model_type in MLA_TYPES:
        nope, rope = get(raw, "qk_nope_head_dim"), get(raw, "qk_rope_head_dim")
        q_rank = raw["q_lora_rank"] if "q_lora_rank" in raw else get(raw, "q_lora_rank")
        token.update(q_rank=q_rank or 0, q_direct=0 if q_rank else 1, kv_rank=get(raw, "kv_lora_rank"),
                     heads_x_nope=a * nope, heads_x_rope=a * rope, rope=rope)
    else:
        kv = arch.num_key_value_heads
        # SDPA with a mask (transformers turns SDPA's own GQA off then) repeats k and v to every head (kv_repeated:
        # the heads added; one kv head repeats as a view, without a copy).
        repeated = kind.endswith("_sliding") and arch.model_type != "gemma2" and kv > 1
        # Eager attention (Gemma-2): its matmuls fold (batch, heads) into one dimension, and the k and v they save
        # are a copy for every head (kv_bmm), except with one sequence and one kv head, where the repeat stays a view
        eager = arch.model_type == "gemma2"
        kv_bmm = (arch.head_dim if batch == 1 and kv == 1 else a * arch.head_dim) if eager else 0
        token.update(q=a * arch.head_dim, kv=kv * arch.head_dim, kv_repeated=(a - kv) * arch.head_dim * repeated,
                     kv_bmm=kv_bmm, kv_heads=kv, head_dim=arch.head_dim)
    if kind.startswith("moe"):
        k, experts = arch.experts_per_token, arch.num_experts
        token.update(routed=k * expert_width(raw), shared=shared_width(raw), k_x_h=k * h, experts=experts, k=k,
                     groups=get(raw, "n_group") or 0)
        # layer_experts_x_h: a router that casts its weight to fp32 (DeepSeek-V3) saves the copy for backward
        layer.update(layer_experts=experts, layer_experts_x_h=experts * h)
    else:
        token["f"] = arch.intermediate_size
    return token, layer


def llama_bytes(arch: Architecture, width: int, tokens: int, moe: bool) -> int:
    """An unmeasured family's layer: Llama's coefficients; an MoE layer's over the MLP width a token passes through
    (routed and shared experts), plus each routed copy of the hidden state in and out of its expert and the router's
    logits with their fp32 softmax and top-k weights and indices (from the code, not measured)."""
    c, q, kv = LLAMA[width][_T], arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    f = arch.routed_width if moe else arch.intermediate_size
    dense = (c["h"] * arch.hidden_size + c["f"] * f + c["q"] * q + c["kv"] * kv
             + c["heads"] * arch.num_attention_heads + c["one"])
    k = arch.experts_per_token
    router = 2 * k * width * arch.hidden_size + arch.num_experts * (width + 4) + k * (4 + 8) if moe else 0
    return (dense + router) * tokens


def layer_bytes(arch: Architecture, width: int, tokens: int, seq: int, kind: str) -> int:
    """Bytes one layer of `kind` saves for `tokens` tokens in sequences of `seq`."""
    if not measured(arch.model_type):
        return llama_bytes(arch, width, tokens, kind.startswith("moe"))
    c = COEFFICIENTS[arch.model_type][kind][width]
    token, layer = features(arch, seq, kind, max(1, tokens // seq))
    return tokens * sum(v * token[k] for k, v in c[_T].items()) + sum(v * layer[k] for k, v in c[_L].items())


def decoder_bytes(arch: Architecture, width: int, tokens: int, seq: int) -> Tuple[int, int]:
    """(the largest layer's bytes, all layers' bytes) for `tokens` tokens in sequences of `seq`."""
    if not measured(arch.model_type):  # its MoE layers may not be known one by one (the meta-device fallback)
        dense, moe = llama_bytes(arch, width, tokens, False), llama_bytes(arch, width, tokens, True)
        return (max(dense if arch.moe_layers < arch.num_hidden_layers else 0, moe if arch.is_moe else 0),
                (arch.num_hidden_layers - arch.moe_layers) * dense + (arch.moe_layers * moe if arch.is_moe else 0))
    kinds = layer_kinds(arch, seq)
    per_kind = {kind: layer_bytes(arch, width, tokens, seq, kind) for kind in set(kinds)}
    return max(per_kind.values()), sum(per_kind[kind] for kind in kinds)
