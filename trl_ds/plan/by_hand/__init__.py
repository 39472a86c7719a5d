"""Families counted from their config by hand-written per-module formulas, torch-free, where no shape template fits
(trl_ds/plan/shape_templates.py): what a layer holds depends on its position, on a list's items rather than their
count, or on a size the config class derives. FAMILIES (below) names the module for each model_type; each module
names the model_types it counts (TYPES) and gives
    settings(raw) -> the values its formulas read, or None where the meta device must decide: a config the formulas
                     were not written for, or one transformers refuses for what the formulas read (a size, a list,
                     their types; a wrong type in a field that shapes nothing, a dropout, is refused when the run
                     builds the model, not here),
    modules(c)    -> module name -> numel of each tensor the module holds directly, as the meta device builds them,
    attribute(c, name) -> what getattr(config, name) gives for the names the planner reads,
and EMBEDDING, LM_HEAD (module names) where they are not model.embed_tokens and lm_head. Every module is held to a
meta-device build by its test (tests/unit/test_by_hand_*.py).

What the modules share lives here:
    checking a config as transformers 5.24 does: well_typed and strict_values (@strict's type check, each field
        declared as (default, *accepted kinds): `fits` says how), is_size, number, pad_fits, listed, accepted_rope,
        accepted_rope_only, odd_rotary, and the names ACTIVATIONS, LAYER_TYPES, LEGACY, KNOWN_KINDS, ROPE_KEYS;
    building the module map: decoder (embeddings, each layer and its norms, final norm, lm_head), below, linear,
        attention, latent_attention, indexer, gated_mlp, routed_experts;
    reading values: over_defaults, and dotted for attribute().
"""
import importlib
from typing import Callable, Dict, List, Optional

# the activations (activations.py) a family here takes unless it names its own: transformers knows them and their
# modules hold no tensors (prelu's and xielu's do); any other goes to the meta device
ACTIVATIONS = (  # activations.py's ACT2CLS less prelu and xielu, whose modules hold tensors
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
    "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2", "relu6",
    "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh")
LAYER_TYPES = (  # configuration_utils.ALLOWED_ATTN_LAYER_TYPES, which validate_layer_type holds layer_types to
    "full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention",
    "compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe", "hybrid",
    "hybrid_sliding", "reference_sliding_attention", "linear_attention")
ROPE_KEYS = ("rope_type", "rope_theta", "partial_rotary_factor")  # what a default RoPE entry may set
ROPE_NEEDS = {"default": (), "linear": ("factor",), "dynamic": ("factor",),  # _validate_*_rope_parameters:
              "yarn": ("factor", "original_max_position_embeddings"),  # a key missing raises, a value only warns
              "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
ROPE_MAY = {"yarn": ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")}
LEGACY = {"mamba": "linear_attention", "attention": "full_attention",  # remapped by PreTrainedConfig.__post_init__
          "deepseek_sparse_attention": "indexed_attention", "qwen_sparse_attention": "indexed_attention"}
KNOWN_KINDS = tuple(k for k in LAYER_TYPES if k != "reference_sliding_attention") + tuple(LEGACY)  # what
# validate_layer_type takes, legacy names included; reference_sliding_attention, untried here, goes to the meta device
Modules = Dict[str, List[int]]


def counted(raw: dict):
    """(the family's module, its settings, its modules) where a module here counts the config, else None."""
    counting = family(raw.get("model_type"))
    c = counting.settings(raw) if counting is not None else None
    return None if c is None else (counting, c, counting.modules(c))


def embedding_and_head(family, held: Modules) -> tuple:
    """(the input embedding's numel, the untied lm_head's or 0)."""
    return (held[getattr(family, "EMBEDDING", "model.embed_tokens")][0],
            held.get(getattr(family, "LM_HEAD", "lm_head"), [0])[0])


def over_defaults(raw: dict, defaults: dict) -> dict:
    """The config's values over the class defaults (a key given as None takes the default)."""
    return {k: raw[k] if raw.get(k) is not None else v for k, v in defaults.items()}


def dotted(values: dict, name: str):
    """values[name], a dotted name read into the dicts a config gives (DBRX's ffn_config.moe_top_k); None if absent."""
    for part in name.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return values


# Checking a config. A strict family declares its fields as {name: (default, *accepted)}, each accepted kind one of
# the annotation's members: a type, None, [kind] (a list of that kind) or a tuple of values (a Literal).

def fits(value, kind) -> bool:
    """Whether @strict takes `value` for one member of a field's annotation (an int is no float, a bool no int)."""
    if kind is None:
        return value is None
    if isinstance(kind, list):
        return isinstance(value, list) and all(fits(v, kind[0]) for v in value)
    if isinstance(kind, tuple):
        return value in kind and type(value) in map(type, kind)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def well_typed(raw: dict, fields: dict) -> bool:
    """Whether @strict takes every field the config gives."""
    return all(any(fits(raw[k], kind) for kind in kinds) for k, (_, *kinds) in fields.items() if k in raw)


def strict_values(raw: dict, fields: dict) -> Optional[dict]:
    """Each field's value as the strict dataclass holds it: the given one (None only where annotated) over the
    default; None where @strict refuses one."""
    return {k: raw.get(k, default) for k, (default, *_) in fields.items()} if well_typed(raw, fields) else None


def number(value) -> bool:
    """An int or a float, not a bool."""
    return fits(value, int) or fits(value, float)


def is_size(value, may_be_0: bool = False) -> bool:
    """A width or count a module can be built with: an int (not a bool) above 0, or 0 where `may_be_0`."""
    return fits(value, int) and value >= (0 if may_be_0 else 1)


def pad_fits(pad, vocab: int) -> bool:
    """nn.Embedding's assert: a padding index inside the vocabulary (counted from either end), or None."""
    return pad is None or fits(pad, int) and -vocab <= pad < vocab


def listed(value, layers: int, kinds) -> bool:
    """What validate_layer_type accepts: a list of one of `kinds` per layer."""
    return isinstance(value, list) and len(value) == layers and all(isinstance(v, str) and v in kinds for v in value)


def accepted_rope(entry, keys=None) -> bool:
    """Whether a RoPE dict is a kind these formulas were checked with, as transformers' RoPE validation accepts it:
    the default, or linear, dynamic, yarn or llama3 with every key their validation requires (ROPE_NEEDS) given as
    a number; rope_theta a number where given; no keys beyond `keys` (None: any) and the kind's own. None of them
    holds a tensor. Other kinds (longrope's per-dimension lists) the meta device decides."""
    if not isinstance(entry, dict):
        return False
    kind = entry.get("rope_type", entry.get("type", "default"))
    needs = ROPE_NEEDS.get(kind)
    return needs is not None and (keys is None or set(entry) <= set(keys) | set(needs) | set(
        ROPE_MAY.get(kind, ()))) and all(k in entry and number(entry[k]) for k in needs) and number(
        entry.get("rope_theta", 0.0))


def accepted_rope_only(raw: dict) -> bool:
    """Whether all the RoPE a config sets at its top level (rope_theta, rope_parameters, rope_scaling) is accepted."""
    return number(raw.get("rope_theta", 1.0)) and all(
        accepted_rope(raw[k]) for k in ("rope_parameters", "rope_scaling") if raw.get(k) is not None)


def odd_rotary(head_dim: int, factor=1.0) -> bool:
    """What validate_rope refuses: an odd head_dim (above 4) rotated whole."""
    return head_dim > 4 and head_dim % 2 == 1 and int(head_dim * factor) == head_dim


# Building the module map: each helper adds the tensors of some modules to `out` (name -> numel of each tensor).

def linear(out: Modules, name: str, fan_in: int, fan_out: int, bias: bool = False) -> None:
    """nn.Linear(fan_in, fan_out): its weight, and its bias where it has one."""
    out[name] = [fan_in * fan_out] + ([fan_out] if bias else [])


def below(prefix: str, held: Modules) -> Modules:
    """`held`'s modules named below `prefix` (its "" entry is the prefix module itself)."""
    return {f"{prefix}.{name}" if name else prefix: sizes for name, sizes in held.items()}


def decoder(c: dict, layer_modules: Callable[[dict, int], Modules], extra: Optional[Modules] = None,
            lm_head: Optional[List[int]] = None, norms=("input_layernorm", "post_attention_layernorm")) -> Modules:
    """A decoder-only causal LM: model.embed_tokens, model.norm, `extra`, each layer's modules below model.layers.i
    (layer_modules(c, i), and its `norms`, hidden_size wide), then the lm_head: `lm_head` where the family fixes it,
    else the untied head's weight."""
    h, vocab = c["hidden_size"], c["vocab_size"]
    out = {"model.embed_tokens": [vocab * h], "model.norm": [h], **(extra or {})}
    for i in range(c["num_hidden_layers"]):
        out.update(below(f"model.layers.{i}", {**layer_modules(c, i), **{name: [h] for name in norms}}))
    if lm_head is not None:
        out["lm_head"] = lm_head
    elif not c["tie_word_embeddings"]:
        out["lm_head"] = [vocab * h]
    return out


def attention(out: Modules, at: str, h: int, heads: int, kv: int, head_dim: int, bias: bool = False) -> None:
    """Grouped-query attention's q_proj, k_proj, v_proj and o_proj, below `at`."""
    linear(out, f"{at}.q_proj", h, heads * head_dim, bias)
    linear(out, f"{at}.k_proj", h, kv * head_dim, bias)
    linear(out, f"{at}.v_proj", h, kv * head_dim, bias)
    linear(out, f"{at}.o_proj", heads * head_dim, h, bias)


def latent_attention(out: Modules, h: int, heads: int, q_rank: Optional[int], kv_rank: int, nope: int, rope: int,
                     v: int, bias: bool) -> None:
    """DeepSeek's multi-head latent attention (names below self_attn): the query through a q_rank bottleneck with its
    norm (None: one q_proj), keys and values through a kv_rank one that also carries the shared rope key."""
    if q_rank is None:
        linear(out, "q_proj", h, heads * (nope + rope))
    else:
        linear(out, "q_a_proj", h, q_rank, bias)
        out["q_a_layernorm"] = [q_rank]
        linear(out, "q_b_proj", q_rank, heads * (nope + rope))
    linear(out, "kv_a_proj_with_mqa", h, kv_rank + rope, bias)
    out["kv_a_layernorm"] = [kv_rank]
    linear(out, "kv_b_proj", kv_rank, heads * (nope + v))
    linear(out, "o_proj", heads * v, h, bias)


def indexer(out: Modules, h: int, q_rank: int, heads: int, head_dim: int) -> None:
    """A sparse-attention indexer (names below self_attn), reading the latent query."""
    linear(out, "indexer.wq_b", q_rank, heads * head_dim)
    linear(out, "indexer.wk", h, head_dim)
    out["indexer.k_norm"] = [head_dim, head_dim]  # a LayerNorm: weight and bias
    linear(out, "indexer.weights_proj", h, heads)


def gated_mlp(out: Modules, at: str, h: int, width: int, bias: bool = False) -> None:
    """A gated MLP's gate_proj and up_proj (h -> width) and down_proj, below `at`."""
    linear(out, f"{at}.gate_proj", h, width, bias)
    linear(out, f"{at}.up_proj", h, width, bias)
    linear(out, f"{at}.down_proj", width, h, bias)


def routed_experts(out: Modules, at: str, h: int, experts: int, width: int) -> None:
    """Routed experts below `at` (fused gate_up and down projections) and their router's weight (`at`.gate)."""
    out[f"{at}.experts"] = [experts * 2 * width * h, experts * h * width]
    out[f"{at}.gate"] = [experts * h]


FAMILIES = {  # model_type -> the module here that counts it (imported when a config of that type is planned: every
    # plan imports this package, few count one of these)
    "bailing_hybrid": "bailing_hybrid", "dory": "dory", "dots3_note_text": "dots3_note", "flint": "flint",
    "gemma4_text": "gemma4", "gemma4_unified_text": "gemma4", "hy_v4": "hy_v4", "inkling2_loop_text": "inkling2_loop",
    "laguna": "laguna", "lara_mini": "lara_mini", "phi4_multimodal": "phi4_multimodal", "reformer": "reformer",
    "zamba2": "zamba2", "zaya": "zaya"}


def family(model_type: str):
    """The module that counts `model_type`, or None."""
    name = FAMILIES.get(model_type)
    return None if name is None else importlib.import_module(f"{__name__}.{name}")
