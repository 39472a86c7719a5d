"""Exact parameter counts of any causal LM, from its config.json or a preset's dimensions.

Fast and torch-free for the families in FAST_TYPES: their transformers modules are written out below (attention
with optional biases and QK-norm, DeepSeek's MLA, gated or fused MLPs, mixture-of-experts blocks with a router,
fused experts and shared experts, dense-then-MoE layer mixes, tied embeddings). Also torch-free: the families
counted by hand-written formulas (trl_ds/plan/by_hand/) and by shape templates (trl_ds/plan/shape_templates.py).
Every other config is counted by building the model on the meta device with transformers (imports torch, no
weights, no download), then kept by config (count_cache.py).
tests/unit/test_params.py and tests/unit/test_model_families.py hold both to a meta-device instantiation, exact to
the parameter. LoRA adapters are counted apart (`count_lora`): PEFT's lora_A and lora_B of each targeted Linear.
"""
import json
import re
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Dict, List, Tuple

from trl_ds.config.model_source import DIM_KEYS, model_source, preset_config, read_json
from trl_ds.errors import ConfigError
from trl_ds.plan import count_cache, shape_templates
from trl_ds.plan.by_hand import counted, embedding_and_head
from trl_ds.plan.gpt_families import GPT_TYPES, extra_embeddings, gpt_layer, standard_keys
from trl_ds.plan.hybrid_families import HYBRID_DEFAULTS, gated_delta_net, is_linear_attention
from trl_ds.plan.more_families import (
    FUSED_EXPERT_TYPES,
    MORE_DEFAULTS,
    MORE_TYPES,
    family_view,
    gpt_oss_experts,
    layout_family,
    lm_head_tensors,
    norm_tensors,
    olmoe_qk_norms,
    starcoder2_mlp,
    uses_bias,
)

FAST_TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
              "deepseek_v3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "qwen3_next") + MORE_TYPES
MLA_TYPES = ("deepseek_v2", "deepseek_v3")
DEEPSEEK_MOE_TYPES = MLA_TYPES + ("glm4_moe",)  # dense first layers, then routed and shared experts
# transformers' config defaults for the keys a config.json may leave out (its configuration_*.py files)
DEFAULTS = {
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "gemma2": {"head_dim": 256, "tie_word_embeddings": True},
    "gemma3_text": {"head_dim": 256, "tie_word_embeddings": True},
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "qkv_bias": True},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
    "deepseek_v2": {"n_routed_experts": 64, "n_shared_experts": 2, "moe_intermediate_size": 1407,
                    "first_k_dense_replace": 0, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    **MORE_DEFAULTS,
    **HYBRID_DEFAULTS,
}
COMMON_DEFAULTS = {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "decoder_sparse_step": 1,
                   "mlp_only_layers": []}
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
EXPERTS = re.compile(r"^(.*?\.experts)(\.|$)")  # a layer's routed experts, by module name
NESTED = {"experts": "ffn_config.moe_num_experts", "per_token": "ffn_config.moe_top_k",  # DBRX's ffn_config
          "width": "ffn_config.ffn_hidden_size"}


@dataclass(frozen=True)
class Architecture:
    """The dimensions the estimates use. MoE fields are 0 for dense models; `config_json` is the whole config the
    model was named by (sorted JSON; empty: these fields are the whole config)."""
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # a dense layer's MLP width
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    moe_layers: int = 0  # layers whose MLP is a mixture of experts
    num_experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0  # routed experts each token goes through (num_experts_per_tok)
    routed_width: int = 0  # MLP width one token passes through in an MoE layer: routed + shared experts
    config_json: str = ""
    source: str = ""  # where the dimensions came from, for the output
    name: str = ""  # what the output calls the model (hub id, folder or preset)

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0

    @property
    def fast(self) -> bool:
        return self.model_type in FAST_TYPES


@dataclass(frozen=True)
class ParamCounts:
    total: int  # unique parameters (a tied lm_head is counted once, as DeepSpeed counts storages)
    active: int  # parameters one token passes through: MoE layers count their routed experts only
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    num_layers: int
    largest_module: int  # L_max: params held directly by one module (ZeRO-3 gathers it whole, with its grads)
    tensors: tuple  # numel of every parameter tensor of the model
    method: str  # "fast" (from dimensions) or "meta" (a meta-device instantiation with transformers)

    def persistent(self, threshold: int) -> int:
        """Parameters ZeRO-3 keeps whole on every rank (tensors below stage3_param_persistence_threshold)."""
        return sum(n for n in self.tensors if n < threshold)


def architecture(model_cfg) -> Architecture:
    """The architecture of the model the config names (trl_ds/config/model_source.py decides which dimensions)."""
    src = model_source(model_cfg)
    raw = src.config if src.config is not None else preset_config(model_cfg)
    arch = replace(from_config(raw, src.where), name=src.name)
    key = f"model.config_path={model_cfg.config_path}" if model_cfg.get("config_path") else (
        f"model.name_or_path={model_cfg.name_or_path}" if model_cfg.get("name_or_path") else f"model={model_cfg.name}")
    check_dimensions(arch, key)
    return arch


def read_hf_config(path: str) -> Architecture:
    """The architecture of a config.json (a file, or a folder holding one): plain JSON for FAST_TYPES."""
    return from_config(read_json(path, f"model.config_path={path}"), f"config.json at {path}")


def check_dimensions(arch: Architecture, source: str) -> None:
    """Counting needs positive sizes and whole attention groups (kv heads dividing heads)."""
    sizes = {k: getattr(arch, k) for k in (*DIM_KEYS, "num_key_value_heads", "head_dim")}
    problems = [f"{source}: {k}={v} must be at least 1." for k, v in sizes.items() if v < 1]
    if not problems and arch.num_attention_heads % arch.num_key_value_heads:
        problems.append(f"{source}: num_attention_heads={arch.num_attention_heads} is not a multiple of "
                        f"num_key_value_heads={arch.num_key_value_heads}.")
    if problems:
        raise ConfigError(problems)


def get(raw: dict, key: str):
    """A config key, else transformers' default for the family."""
    if raw.get(key) is not None:
        return raw[key]
    return DEFAULTS.get(raw["model_type"], {}).get(key, COMMON_DEFAULTS.get(key))


def from_config(raw: dict, where: str) -> Architecture:
    text, name = json.dumps(raw, sort_keys=True), raw.get("model_type")
    raw = standard_keys(family_view(raw))
    if name not in FAST_TYPES or any(k not in raw for k in DIM_KEYS):
        return counted_elsewhere(text, where)
    t, h, heads = raw["model_type"], raw["hidden_size"], raw["num_attention_heads"]
    kv = get(raw, "num_key_value_heads") or heads
    head_dim = get(raw, "head_dim") or h // max(heads, 1)
    if t in MLA_TYPES:  # the score width; kv heads are as many as heads
        head_dim, kv = get(raw, "qk_nope_head_dim") + get(raw, "qk_rope_head_dim"), heads
    moe = [i for i in range(raw["num_hidden_layers"]) if is_moe_layer(raw, i)]
    experts, per_token = expert_counts(raw) if moe else (0, 0)
    return Architecture(model_type=name, vocab_size=raw["vocab_size"], hidden_size=h,
                        intermediate_size=raw["intermediate_size"], num_hidden_layers=raw["num_hidden_layers"],
                        num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                        tie_word_embeddings=bool(get(raw, "tie_word_embeddings")),
                        attention_bias=bool(get(raw, "attention_bias")), mlp_bias=bool(get(raw, "mlp_bias")),
                        moe_layers=len(moe), num_experts=experts, experts_per_token=per_token,
                        routed_width=per_token * expert_width(raw) + shared_width(raw) if moe else 0,
                        config_json=text, source=where)


def expert_counts(raw: dict) -> Tuple[int, int]:
    return routing(lambda key: get(raw, key))


def routing(attr) -> Tuple[int, int]:
    """(routed experts per MoE layer, experts one token passes through) from `attr(name)` (a config's value or None);
    unknown routing: every expert (an upper bound)."""
    experts = next((attr(k) for k in EXPERT_COUNT_KEYS if attr(k)), 0)
    if experts:
        return experts, attr("num_experts_per_tok") or attr("top_k_experts") or experts  # Gemma 4's name
    experts = attr(NESTED["experts"]) or 0
    return experts, attr(NESTED["per_token"]) or experts


def config_attr(config):
    """getattr(config, name), through sub-configs for a dotted name (DBRX's ffn_config.moe_top_k); None if absent."""
    def attr(name):
        value = config
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        return value
    return attr


def config_dict(arch: Architecture) -> dict:
    if arch.config_json:
        return family_view(json.loads(arch.config_json))
    return {"model_type": arch.model_type, "vocab_size": arch.vocab_size, "hidden_size": arch.hidden_size,
            "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_hidden_layers,
            "num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
            "head_dim": arch.head_dim, "tie_word_embeddings": arch.tie_word_embeddings,
            "attention_bias": arch.attention_bias, "mlp_bias": arch.mlp_bias}


# ---- the fast families' modules, as transformers 5 defines them -------------------------------------------------

class Modules:
    """Module name -> numel of each tensor it holds directly; Linear shapes by short name, for LoRA."""

    def __init__(self):
        self.tensors: Dict[str, List[int]] = {}
        self.linears: Dict[str, tuple] = {}

    def linear(self, name: str, fan_in: int, fan_out: int, bias: bool = False) -> None:
        self.tensors[name] = [fan_in * fan_out] + ([fan_out] if bias else [])
        self.linears[name.rsplit(".", 1)[-1]] = (fan_in, fan_out)

    def norm(self, *names_and_sizes) -> None:
        for name, size in names_and_sizes:
            self.tensors[name] = [size]


def is_moe_layer(raw: dict, i: int) -> bool:
    t = raw["model_type"]
    if t in FUSED_EXPERT_TYPES:
        return True
    if t in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        return (i not in get(raw, "mlp_only_layers") and get(raw, "num_experts") > 0
                and (i + 1) % get(raw, "decoder_sparse_step") == 0)
    if t in DEEPSEEK_MOE_TYPES:
        return i >= get(raw, "first_k_dense_replace")
    return False


def expert_width(raw: dict) -> int:
    return raw["intermediate_size"] if raw["model_type"] in FUSED_EXPERT_TYPES else get(raw, "moe_intermediate_size")


def shared_width(raw: dict) -> int:
    t = raw["model_type"]
    if t in ("qwen2_moe", "qwen3_next"):
        return get(raw, "shared_expert_intermediate_size")
    return get(raw, "moe_intermediate_size") * get(raw, "n_shared_experts") if t in DEEPSEEK_MOE_TYPES else 0


def attention(m: Modules, raw: dict, a: Architecture) -> None:
    t, h, heads, kv, hd = a.model_type, a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.head_dim
    if t in MLA_TYPES:
        mla_attention(m, raw, a)
        return
    if t == "phi3":
        m.linear("self_attn.qkv_proj", h, (heads + 2 * kv) * hd)
        m.linear("self_attn.o_proj", heads * hd, h)
        return
    configurable = a.attention_bias and t not in ("mistral", "mixtral", "qwen2", "qwen2_moe")
    configurable = uses_bias(raw, "attention_bias") if t == "starcoder2" else configurable
    qkv_bias = configurable or t == "qwen2" or (t == "qwen2_moe" and bool(get(raw, "qkv_bias")))
    configurable = configurable and t not in ("glm4", "glm4_moe")  # GLM-4's o_proj never has a bias
    qkv_bias, configurable = raw.get("qkv_bias_on", qkv_bias), raw.get("o_bias_on", configurable)  # an alias's keys
    gated = 2 if t == "qwen3_next" else 1  # Qwen3-Next's q_proj also gives the attention output's gate
    for name, fan_out in (("q_proj", gated * heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        m.linear(f"self_attn.{name}", h, fan_out, qkv_bias)
    m.linear("self_attn.o_proj", heads * hd, h, configurable)
    if t in ("qwen3", "qwen3_moe", "gemma3_text", "qwen3_next") or (t == "glm4_moe" and get(raw, "use_qk_norm")):
        m.norm(("self_attn.q_norm", hd), ("self_attn.k_norm", hd))
    elif t == "olmo2":
        m.norm(("self_attn.q_norm", heads * hd), ("self_attn.k_norm", kv * hd))
    elif t == "olmoe":
        olmoe_qk_norms(m, a)
    elif t == "gpt_oss":
        m.tensors["self_attn"] = [heads]  # the attention sinks, one per head


def mla_attention(m: Modules, raw: dict, a: Architecture) -> None:
    """DeepSeek's multi-head latent attention: low-rank query and key/value projections with their norms."""
    h, heads, bias = a.hidden_size, a.num_attention_heads, a.attention_bias
    nope, rope, v = get(raw, "qk_nope_head_dim"), get(raw, "qk_rope_head_dim"), get(raw, "v_head_dim")
    q_rank, kv_rank = raw.get("q_lora_rank", get(raw, "q_lora_rank")), get(raw, "kv_lora_rank")
    if q_rank:
        m.linear("self_attn.q_a_proj", h, q_rank, bias)
        m.norm(("self_attn.q_a_layernorm", q_rank))
        m.linear("self_attn.q_b_proj", q_rank, heads * (nope + rope))
    else:
        m.linear("self_attn.q_proj", h, heads * (nope + rope))
    m.linear("self_attn.kv_a_proj_with_mqa", h, kv_rank + rope, bias)
    m.norm(("self_attn.kv_a_layernorm", kv_rank))
    m.linear("self_attn.kv_b_proj", kv_rank, heads * (nope + v))
    m.linear("self_attn.o_proj", heads * v, h, bias)


def gated_mlp(m: Modules, prefix: str, h: int, f: int, bias: bool = False) -> None:
    for name, fan_in, fan_out in (("gate_proj", h, f), ("up_proj", h, f), ("down_proj", f, h)):
        m.linear(f"{prefix}.{name}", fan_in, fan_out, bias)


def mlp(m: Modules, raw: dict, a: Architecture, moe: bool) -> int:
    """The layer's MLP; returns the parameters of its routed experts (0 for a dense MLP)."""
    t, h = a.model_type, a.hidden_size
    if not moe:
        if t in ("phi3", "glm4"):
            m.linear("mlp.gate_up_proj", h, 2 * a.intermediate_size)
            m.linear("mlp.down_proj", a.intermediate_size, h)
        elif t == "starcoder2":
            starcoder2_mlp(m, raw, a)
        else:
            bias = raw.get("mlp_bias_on", a.mlp_bias and t in ("llama", "deepseek_v2", "granite"))
            gated_mlp(m, "mlp", h, a.intermediate_size, bias)
        return 0
    if t == "gpt_oss":
        return gpt_oss_experts(m, a)
    f, experts = expert_width(raw), a.num_experts
    m.tensors["mlp.gate"] = [experts * h]  # the router
    m.tensors["mlp.experts"] = [experts * 2 * f * h, experts * h * f]  # fused gate_up_proj and down_proj
    if t in ("qwen2_moe", "qwen3_next"):
        gated_mlp(m, "mlp.shared_expert", h, shared_width(raw))
        m.tensors["mlp.shared_expert_gate"] = [h]
    elif t in DEEPSEEK_MOE_TYPES:
        gated_mlp(m, "mlp.shared_experts", h, shared_width(raw), a.mlp_bias and t == "deepseek_v2")
    return sum(m.tensors["mlp.experts"])


def layer_norms(m: Modules, a: Architecture) -> None:
    h = a.hidden_size
    names = {"gemma2": ("input", "post_attention", "pre_feedforward", "post_feedforward"),
             "gemma3_text": ("input", "post_attention", "pre_feedforward", "post_feedforward"),
             "olmo2": ("post_attention", "post_feedforward"),
             "glm4": ("input", "post_self_attn", "post_attention", "post_mlp"),
             }.get(a.model_type, ("input", "post_attention"))
    for n in names:
        m.tensors[f"{n}_layernorm"] = norm_tensors(a.model_type, h)


def decoder_layer(arch: Architecture, i: int) -> Tuple[Modules, int]:
    raw, m = config_dict(arch), Modules()
    arch = replace(arch, model_type=layout_family(arch.model_type))
    if arch.model_type in GPT_TYPES:
        gpt_layer(m, raw, arch)
        return m, 0
    if is_linear_attention(raw, i):
        gated_delta_net(m, raw, arch)
    else:
        attention(m, raw, arch)
    routed = mlp(m, raw, arch, is_moe_layer(raw, i))
    layer_norms(m, arch)
    return m, routed


# ---- counts -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    modules: tuple  # per module holding parameters: the numel of each tensor it holds directly
    embedding: int
    lm_head: int
    routed: tuple  # per MoE layer: (parameters of its routed experts, experts, experts per token)
    method: str


def fast_layout(arch: Architecture) -> Layout:
    arch = replace(arch, model_type=layout_family(arch.model_type))
    embedding = arch.vocab_size * arch.hidden_size
    lm_head = 0 if arch.tie_word_embeddings else embedding
    head = [lm_head_tensors(config_dict(arch), lm_head, arch.vocab_size)] if lm_head else []
    extra = extra_embeddings(config_dict(arch), arch.hidden_size)
    modules, routed = [[embedding], *extra, norm_tensors(arch.model_type, arch.hidden_size)] + head, []
    for i in range(arch.num_hidden_layers):
        layer, experts = decoder_layer(arch, i)
        modules += layer.tensors.values()
        if experts:
            routed.append((experts, arch.num_experts, arch.experts_per_token))
    return Layout(modules=tuple(tuple(t) for t in modules), embedding=embedding, lm_head=lm_head,
                  routed=tuple(routed), method="fast")


def meta_model(config_json: str):
    """The model on the meta device (no memory, no weights), or ConfigError when transformers cannot build it."""
    import torch
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(config_json)
    kind = raw.pop("model_type")
    try:
        config = AutoConfig.for_model(kind, **raw)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, ImportError, StrictDataclassError, AssertionError,
            IndexError, ZeroDivisionError, NotImplementedError, RuntimeError) as err:  # nn.Embedding asserts a
        # pad_token_id inside the vocabulary; reformer's layers index their kinds' list, zamba2's divide by head
        # counts; torch refuses inkling2_loop's negative sizes
        said = next((line for line in str(err).splitlines() if line.strip()), "")  # timm's starts with a newline
        raise ConfigError([f"model_type {kind!r} is not a causal LM that transformers can build here "
                           f"({type(err).__name__}: {said[:200]}), so its size is unknown. "
                           f"Name a causal LM's folder or hub id (model.name_or_path=...) or its config.json "
                           f"(model.config_path=...)."]) from None
    if hasattr(type(config), "allow_global_per_layer_attribute_access"):  # gemma4's head_dim differs by layer
        config.allow_global_per_layer_attribute_access = True  # kind: the estimates read the config's own value
    return config, model


@lru_cache(maxsize=16)
def meta_architecture(config_json: str, where: str) -> Architecture:
    """Dimensions of any family, read from transformers' config object (its attribute_map knows every name)."""
    config, _model = meta_model(config_json)
    return described(config_attr(config), config.model_type, meta_layout(config_json).routed,
                     config_json, where)


def described(attr, model_type: str, routed: tuple, config_json: str, where: str) -> Architecture:
    """The dimensions the estimates use, from `attr(name)` (what getattr(config, name) gives, or None)."""
    h, heads, layers = attr("hidden_size"), attr("num_attention_heads"), attr("num_hidden_layers")
    missing = [k for k, v in (("hidden_size", h), ("num_attention_heads", heads), ("num_hidden_layers", layers),
                              ("vocab_size", attr("vocab_size"))) if not isinstance(v, int)]
    if missing:  # attention-free (mamba, rwkv) or a composite config whose text model is a sub-config
        raise ConfigError([f"model_type {model_type!r} has no top-level {', '.join(missing)}: the planner's "
                           f"estimates are written for attention transformers. Name one with attention heads at the "
                           f"top level of its config (model.name_or_path=... or model.config_path=...)."])
    experts, per_token = routing(attr)
    return Architecture(
        model_type=model_type, vocab_size=attr("vocab_size"), hidden_size=h,
        intermediate_size=attr("intermediate_size") or attr(NESTED["width"]) or 4 * h, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=attr("num_key_value_heads") or heads,
        head_dim=attr("head_dim") or h // max(heads, 1),
        tie_word_embeddings=bool(attr("tie_word_embeddings")), moe_layers=len(routed),
        num_experts=experts if routed else 0, experts_per_token=per_token if routed else 0,
        routed_width=per_token * (attr("moe_intermediate_size") or attr("intermediate_size") or attr(NESTED["width"])
                                  or 4 * h)
        if routed else 0,
        config_json=config_json, source=where)


@lru_cache(maxsize=16)
def meta_layout(config_json: str) -> Layout:
    config, model = meta_model(config_json)
    modules: Dict[str, List[int]] = {}
    for name, p in model.named_parameters():  # already without the tied duplicates
        modules.setdefault(name.rsplit(".", 1)[0], []).append(p.numel())
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    lm_head = 0 if head is None or head.weight is embedding else head.weight.numel()
    experts, per_token = routing(config_attr(config))
    return Layout(modules=tuple(tuple(v) for v in modules.values()), embedding=embedding.numel(), lm_head=lm_head,
                  routed=tuple((n, experts, per_token) for n in routed_groups(modules)) if experts else (),
                  method="meta")


def routed_groups(modules: Dict[str, List[int]]) -> List[int]:
    """The numel of each layer's routed experts: fused experts (one module) or a ModuleList of them, one group per
    layer, from module names."""
    groups: Dict[str, int] = {}
    for name, sizes in modules.items():
        found = EXPERTS.match(name)
        if found:
            groups[found[1]] = groups.get(found[1], 0) + sum(sizes)
    return list(groups.values())


def counted_elsewhere(config_json: str, where: str) -> Architecture:
    """A family not written out here: its count kept by config (trl_ds/plan/count_cache.py), else the meta device's
    count, which is then kept. A shape template (trl_ds/plan/shape_templates.py) counts without either."""
    counted = own_layout(config_json)
    if counted is not None:
        attr, lay = counted
        return described(attr, json.loads(config_json)["model_type"], lay.routed, config_json, where)
    stored = count_cache.read(config_json)
    if stored is not None:
        try:
            return replace(Architecture(**stored["architecture"]), source=where)
        except TypeError:  # fields of another trl_ds version: count again
            pass
    arch = meta_architecture(config_json, where)
    count_cache.write(config_json, asdict(arch), asdict(meta_layout(config_json)))
    return arch


def own_layout(config_json: str):
    """(what getattr(config, name) gives, the layout) of a config counted without torch beyond the families written
    out above: by hand-written formulas (trl_ds/plan/by_hand/), else by a shape template; None where neither does."""
    by_hand = hand_layout(config_json)
    if by_hand is not None:
        return by_hand
    templated = template_layout(config_json)
    if templated is None:
        return None
    tpl, values, lay = templated
    return (lambda name: shape_templates.attribute(tpl, values, name)), lay


@lru_cache(maxsize=16)
def hand_layout(config_json: str):
    """(what getattr(config, name) gives, the layout) where a family in trl_ds/plan/by_hand/ counts the config, else
    None: kept, as a plan reads it for the architecture and again for the layout."""
    by_hand = counted(json.loads(config_json))
    if by_hand is None:
        return None
    family, c, held = by_hand
    attr = lambda name: family.attribute(c, name)  # noqa: E731
    experts, per_token = routing(attr)
    embedding, lm_head = embedding_and_head(family, held)
    return attr, Layout(modules=tuple(tuple(v) for v in held.values()), embedding=embedding, lm_head=lm_head,
                        routed=tuple((n, experts, per_token) for n in routed_groups(held)) if experts else (),
                        method="fast")


@lru_cache(maxsize=16)
def template_layout(config_json: str):
    """(template, its variables' values, the layout) where a shape template vouches for the config, else None."""
    vouched = shape_templates.variables(json.loads(config_json))
    if vouched is None:
        return None
    tpl, values = vouched
    modules: Dict[str, list] = {}  # module pattern -> [instances, numel of each tensor one instance holds]
    numel = {}
    try:
        found = shape_templates.tensors(tpl, values)
        groups = {group: shape_templates.evaluate(expr, values) for group, expr in tpl["groups"].items()}
    except (ZeroDivisionError, KeyError):  # a size of 0 the survey never built, or one a config leaves None
        return None  # where the survey saw it set: the meta device decides
    if any(instances < 0 for _, instances, _ in found):  # more first dense layers than layers (dots1's
        return None  # first_k_dense_replace): a count the survey never built
    for pattern, instances, size in found:
        if instances:
            numel[pattern] = size
            held = modules.setdefault(pattern.rsplit(".", 1)[0], [instances, []])
            held[1].append(size)
    routed = []
    experts, per_token = routing(lambda name: shape_templates.attribute(tpl, values, name))
    for group, layers in groups.items():
        held = sum(size * instances for pattern, instances, size in found if pattern.startswith(group + "."))
        routed += [(held // layers, experts, per_token)] * layers if layers and experts else []
    lay = Layout(modules=tuple(tuple(sizes) for instances, sizes in modules.values() for _ in range(instances)),
                 embedding=numel[tpl["embedding"]], lm_head=numel.get(tpl["lm_head"], 0) if tpl["lm_head"] else 0,
                 routed=tuple(routed), method="template")
    return tpl, values, lay


def stored_layout(config_json: str) -> Layout:
    counted = own_layout(config_json)
    if counted is not None:
        return counted[1]
    stored = count_cache.read(config_json)
    try:
        kept = stored["layout"]
        return Layout(modules=tuple(tuple(m) for m in kept["modules"]), embedding=kept["embedding"],
                      lm_head=kept["lm_head"], routed=tuple(tuple(r) for r in kept["routed"]), method=kept["method"])
    except (TypeError, KeyError):
        return meta_layout(config_json)


def layout(arch: Architecture) -> Layout:
    return fast_layout(arch) if arch.fast else stored_layout(arch.config_json)


def count_params(arch: Architecture) -> ParamCounts:
    lay = layout(arch)
    total = sum(sum(m) for m in lay.modules)
    idle = sum(n // experts * (experts - per_token) for n, experts, per_token in lay.routed)
    return ParamCounts(total=total, active=total - idle, embedding=lay.embedding, lm_head=lay.lm_head,
                       num_layers=arch.num_hidden_layers, largest_module=max(sum(m) for m in lay.modules),
                       tensors=tuple(n for m in lay.modules for n in m), method=lay.method)


def count_classifier(arch: Architecture, num_labels: int = 1) -> ParamCounts:
    """AutoModelForSequenceClassification of the same config (the reward model): the base model with a `score`
    Linear(hidden, num_labels, bias=False) where the causal LM has its lm_head (a tied head held no tensor of its
    own, so only the score is added). Every family trl_ds counts builds its score without a bias."""
    counts = count_params(arch)
    score = arch.hidden_size * num_labels
    tensors = list(counts.tensors)
    if counts.lm_head:
        tensors.remove(counts.lm_head)  # the lm_head is one module holding one tensor
    tensors.append(score)
    total = counts.total - counts.lm_head + score
    return replace(counts, total=total, active=counts.active - counts.lm_head + score, lm_head=0,
                   largest_module=max(tensors), tensors=tuple(tensors))


def linear_shapes(arch: Architecture) -> Dict[str, tuple]:
    """(in, out) of each Linear in the first decoder layer, by the name PEFT targets."""
    if not arch.fast:
        h, f = arch.hidden_size, arch.intermediate_size
        q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, f),
                "up_proj": (h, f), "down_proj": (f, h)}
    return decoder_layer(arch, 0)[0].linears


def layer_modules(arch: Architecture) -> Dict[str, tuple]:
    """Each Linear of one decoder layer by name (the names peft.target_modules may use)."""
    return linear_shapes(arch)


@dataclass(frozen=True)
class AdapterCounts:
    """LoRA's trainable parameters, as PEFT adds them: per targeted Linear(in, out), lora_A (r × in) and lora_B
    (out × r), in every decoder layer."""
    total: int
    largest: int  # numel of the largest lora_A or lora_B (ZeRO-3 gathers trainable modules one at a time)
    layer_tensors: tuple  # numel of each adapter tensor in one decoder layer
    num_layers: int

    def persistent(self, threshold: int) -> int:
        """Adapter parameters ZeRO-3 keeps whole on every rank (below stage3_param_persistence_threshold)."""
        return sum(n for n in self.layer_tensors if n < threshold) * self.num_layers


def count_lora(arch: Architecture, r: int, targets) -> AdapterCounts:
    shapes = linear_shapes(arch) if targets else {}
    tensors = tuple(n for t in targets for n in (r * shapes[t][0], shapes[t][1] * r))
    return AdapterCounts(total=sum(tensors) * arch.num_hidden_layers, largest=max(tensors, default=0),
                         layer_tensors=tensors, num_layers=arch.num_hidden_layers)


def describe_count(n: int) -> str:
    """1234567 -> '1.23M', for tables."""
    for unit, size in (("B", 10 ** 9), ("M", 10 ** 6), ("K", 10 ** 3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)
