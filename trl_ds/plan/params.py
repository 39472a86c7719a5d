"""Exact parameter counts of any causal LM transformers can build, from its config.json or a preset's dimensions.

transformers' own classes build the model on the meta device (meta_count.py), and the count is kept by config
(count_cache.py), so the presets plan without torch. LoRA adapters are counted apart (`count_lora`). The activation
model reads a layer through `config_dict`, `is_moe_layer`, `expert_width` and `shared_width`.
"""
import json
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Dict, Tuple

from trl_ds.config.model_source import DIM_KEYS, model_source, preset_config, read_json
from trl_ds.errors import ConfigError
from trl_ds.plan import count_cache

MLA_TYPES = ("deepseek_v2", "deepseek_v3")  # DeepSeek's multi-head latent attention: scores nope + rope wide
DEEPSEEK_MOE_TYPES = MLA_TYPES + ("glm4_moe",)  # dense first layers, then routed and shared experts
QWEN_MOE_TYPES = ("qwen2_moe", "qwen3_moe", "qwen3_next")  # MoE every decoder_sparse_step-th layer, but mlp_only_layers
FUSED_EXPERT_TYPES = ("mixtral", "olmoe", "phimoe", "gpt_oss")  # every layer MoE; experts intermediate_size wide
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
NESTED = {"experts": "ffn_config.moe_num_experts", "per_token": "ffn_config.moe_top_k",  # DBRX's ffn_config
          "width": "ffn_config.ffn_hidden_size"}
WIDTH_KEYS = ("intermediate_size", "ffn_hidden_size", "n_inner", NESTED["width"])  # a dense MLP's, else 4 × hidden
SIZES = (*DIM_KEYS, "num_key_value_heads", "head_dim")
RESIZABLE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim")  # what a changed Architecture (AutoTP's rank) may change


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


@dataclass(frozen=True)
class ParamCounts:
    total: int  # unique parameters (a tied lm_head is counted once, as DeepSpeed counts storages)
    active: int  # parameters one token passes through: MoE layers count their routed experts only
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    num_layers: int
    largest_module: int  # L_max: params held directly by one module (ZeRO-3 gathers it whole, with its grads)
    tensors: tuple  # numel of every parameter tensor of the model
    method: str  # "meta": transformers' classes on the meta device (now, or kept by config)

    def persistent(self, threshold: int) -> int:
        """Parameters ZeRO-3 keeps whole on every rank (tensors below stage3_param_persistence_threshold)."""
        return sum(n for n in self.tensors if n < threshold)


def architecture(model_cfg) -> Architecture:
    """The architecture of the model the config names (trl_ds/config/model_source.py decides which dimensions)."""
    src = model_source(model_cfg)
    raw = src.config if src.config is not None else preset_config(model_cfg)
    key = f"model.config_path={model_cfg.config_path}" if model_cfg.get("config_path") else (
        f"model.name_or_path={model_cfg.name_or_path}" if model_cfg.get("name_or_path") else f"model={model_cfg.name}")
    check_dimensions({k: v for k, v in raw.items() if k in SIZES and isinstance(v, int)}, key)  # before building
    arch = replace(from_config(raw, src.where), name=src.name)
    check_dimensions({k: getattr(arch, k) for k in SIZES}, key)
    return arch


def read_hf_config(path: str) -> Architecture:
    """The architecture of a config.json (a file, or a folder holding one)."""
    return from_config(read_json(path, f"model.config_path={path}"), f"config.json at {path}")


def check_dimensions(sizes: dict, source: str) -> None:
    """Counting needs positive sizes and whole attention groups (kv heads dividing heads): a config.json's own sizes
    are checked before transformers builds it (its errors for a zero size are obscure), the built model's after."""
    problems = [f"{source}: {k}={v} must be at least 1." for k, v in sizes.items() if v < 1]
    heads, kv = sizes.get("num_attention_heads"), sizes.get("num_key_value_heads")
    if not problems and heads and kv and heads % kv:
        problems.append(f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}.")
    if problems:
        raise ConfigError(problems)


def from_config(raw: dict, where: str) -> Architecture:
    """The architecture of a config.json's content, as transformers builds it."""
    text = json.dumps(raw, sort_keys=True)
    return Architecture(**entry(text)["architecture"], config_json=text, source=where)


KEPT = tuple(f.name for f in fields(Architecture) if f.name not in ("config_json", "source", "name"))


@lru_cache(maxsize=64)
def entry(config_json: str) -> dict:
    """What the meta device counted for this config: kept by config (count_cache.py), else counted now and kept."""
    stored = count_cache.read(config_json)
    if stored is not None and set(stored.get("architecture", {})) == set(KEPT):
        return stored
    from trl_ds.plan import meta_count  # imports torch: only for a config not counted before

    config, counted = meta_count.count(json.loads(config_json))
    attr = config_attr(config)
    experts, per_token = routing(attr)
    counted["routed"] = [[n, experts, per_token] for n in counted.pop("experts")] if experts else []
    arch = described(attr, config.model_type, len(counted["routed"]))
    counted["architecture"] = {k: getattr(arch, k) for k in KEPT}
    count_cache.write(config_json, counted)
    return counted


def routing(attr) -> Tuple[int, int]:
    """(routed experts per MoE layer, experts per token) from `attr(name)`; unknown: every expert."""
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


def described(attr, model_type: str, moe_layers: int) -> Architecture:
    """The dimensions the estimates use, from `attr(name)` (getattr on the config, or None)."""
    h, heads, layers = attr("hidden_size"), attr("num_attention_heads"), attr("num_hidden_layers")
    missing = [k for k, v in (("hidden_size", h), ("num_attention_heads", heads), ("num_hidden_layers", layers),
                              ("vocab_size", attr("vocab_size"))) if not isinstance(v, int)]
    if missing:  # attention-free (mamba, rwkv) or a composite config whose text model is a sub-config
        raise ConfigError([f"model_type {model_type!r} has no top-level {', '.join(missing)}: the planner's "
                           f"estimates are written for attention transformers. Name one with attention heads at the "
                           f"top level of its config (model.name_or_path=... or model.config_path=...)."])
    experts, per_token = routing(attr)
    head_dim, kv = attr("head_dim") or h // max(heads, 1), attr("num_key_value_heads") or attr("num_kv_heads") or heads
    if attr("multi_query") and not attr("new_decoder_architecture"):  # falcon's and gpt_bigcode's one kv head
        kv = 1
    if model_type in MLA_TYPES:  # the score width; kv heads are as many as heads
        head_dim, kv = attr("qk_nope_head_dim") + attr("qk_rope_head_dim"), heads
    width = next((attr(k) for k in WIDTH_KEYS if attr(k)), 4 * h)
    return Architecture(
        model_type=model_type, vocab_size=attr("vocab_size"), hidden_size=h, intermediate_size=width,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
        tie_word_embeddings=bool(attr("tie_word_embeddings")), attention_bias=bool(attr("attention_bias")),
        mlp_bias=bool(attr("mlp_bias")), moe_layers=moe_layers, num_experts=experts if moe_layers else 0,
        experts_per_token=per_token if moe_layers else 0,
        routed_width=per_token * _expert_width(attr, model_type, width) + _shared_width(attr) if moe_layers else 0)


# ---- what the activation model reads about a layer (trl_ds/plan/saved_activations.py) ---------------------------

def dims_config(arch: Architecture) -> dict:
    """An Architecture built from its fields alone, as the config.json it stands for."""
    return {"model_type": arch.model_type, "vocab_size": arch.vocab_size, "hidden_size": arch.hidden_size,
            "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_hidden_layers,
            "num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
            "head_dim": arch.head_dim, "tie_word_embeddings": arch.tie_word_embeddings,
            "attention_bias": arch.attention_bias, "mlp_bias": arch.mlp_bias}


def config_dict(arch: Architecture) -> dict:
    """The model's config as transformers resolves it (every default filled in)."""
    return entry(arch.config_json or json.dumps(dims_config(arch), sort_keys=True))["config"]


def get(raw: dict, key: str):
    """A key of config_dict's result (None where the family has no such key)."""
    return raw.get(key)


def is_moe_layer(raw: dict, i: int) -> bool:
    """Whether decoder layer i's MLP is a mixture of experts, in the families the activation model measured."""
    t = raw["model_type"]
    if t in FUSED_EXPERT_TYPES:
        return True
    if t in QWEN_MOE_TYPES:
        return (i not in (raw.get("mlp_only_layers") or []) and any(raw.get(k) for k in EXPERT_COUNT_KEYS)
                and (i + 1) % (raw.get("decoder_sparse_step") or 1) == 0)
    if t in DEEPSEEK_MOE_TYPES:
        return i >= (raw.get("first_k_dense_replace") or 0)
    return False


def expert_width(raw: dict) -> int:
    return _expert_width(raw.get, raw["model_type"], raw.get("intermediate_size"))


def shared_width(raw: dict) -> int:
    return _shared_width(raw.get)


def _expert_width(attr, model_type: str, dense: int) -> int:
    """One routed expert's MLP width: the MoE width where the family has one, else the dense layer's."""
    return dense if model_type in FUSED_EXPERT_TYPES else attr("moe_intermediate_size") or dense


def _shared_width(attr) -> int:
    """The shared experts' MLP width a token also passes through (Qwen's shared_expert, DeepSeek's n_shared)."""
    return attr("shared_expert_intermediate_size") or (attr("moe_intermediate_size") or 0) * (
        attr("n_shared_experts") or 0)


# ---- counts -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    modules: tuple  # per module holding parameters: the numel of each tensor it holds directly
    embedding: int
    lm_head: int
    routed: tuple  # per MoE layer: (parameters of its routed experts, experts, experts per token)
    method: str


def counted_json(arch: Architecture) -> str:
    """The config counted for `arch`: its own, with the dimensions it changes (one AutoTP rank's heads and MLP width:
    trl_ds/plan/tensor_parallel.py) written in, as the config.json of that smaller model would hold them."""
    if not arch.config_json:
        return json.dumps(dims_config(arch), sort_keys=True)
    whole = entry(arch.config_json)["architecture"]
    changed = {k: getattr(arch, k) for k in RESIZABLE if getattr(arch, k) != whole[k]}
    if not changed:
        return arch.config_json
    if arch.model_type not in MLA_TYPES:
        changed["head_dim"] = arch.head_dim  # fewer heads, each as wide
    return json.dumps({**json.loads(arch.config_json), **changed}, sort_keys=True)


@lru_cache(maxsize=64)
def stored_layout(config_json: str) -> Layout:
    kept = entry(config_json)
    return Layout(modules=tuple(tuple(m) for m in kept["modules"]), embedding=kept["embedding"],
                  lm_head=kept["lm_head"], routed=tuple(tuple(r) for r in kept["routed"]), method="meta")


def layout(arch: Architecture) -> Layout:
    return stored_layout(counted_json(arch))


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
    return {name: tuple(shape) for name, shape in entry(counted_json(arch))["linears"].items()}


def layer_modules(arch: Architecture) -> Dict[str, tuple]:
    """Each Linear of one decoder layer by name (the names peft.target_modules may use)."""
    return linear_shapes(arch)


@dataclass(frozen=True)
class AdapterCounts:
    """LoRA's trainable parameters as PEFT adds them: lora_A (r × in) and lora_B (out × r) per target."""
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
