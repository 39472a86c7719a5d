"""Exact parameter counts from architecture dimensions, without torch and without a download.

The counts follow transformers' decoder-only causal LMs (Llama, Mistral, Qwen2, Qwen3): token embedding, per layer a
GQA attention block (q/k/v/o projections, optional biases, Qwen3's per-head q/k norms) and a gated MLP
(gate/up/down), two RMSNorms per layer, a final norm, and an lm_head that is either tied to the embedding or its own
matrix. LoRA adapters are counted apart (`count_lora`): PEFT's lora_A and lora_B of each targeted Linear.
tests/unit/test_params.py holds them to a meta-device instantiation and to peft.get_peft_model, exact to the parameter.
"""
import json
import os
from dataclasses import dataclass
from typing import Dict, List

from trl_ds.errors import ConfigError

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DIM_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


@dataclass(frozen=True)
class Architecture:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # llama/qwen3: bias on q, k, v and o; qwen2 always has q/k/v biases, mistral none
    mlp_bias: bool = False


@dataclass(frozen=True)
class ParamCounts:
    total: int  # unique parameters (a tied lm_head is counted once, as DeepSpeed counts storages)
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    per_layer: int
    num_layers: int
    final_norm: int
    largest_module: int  # L_max: params held directly by one module (ZeRO-3 gathers it whole, with its grads)
    layer_tensors: tuple  # numel of each parameter tensor in one decoder layer

    def persistent(self, threshold: int) -> int:
        """Parameters ZeRO-3 keeps whole on every rank (tensors below stage3_param_persistence_threshold)."""
        small = sum(n for n in self.layer_tensors if n < threshold) * self.num_layers
        return small + (self.final_norm if self.final_norm < threshold else 0) + sum(
            n for n in (self.embedding, self.lm_head) if 0 < n < threshold)


def architecture(model_cfg) -> Architecture:
    """The model group's dimensions, or those of `model.config_path` (a Hugging Face config.json) when it is set."""
    path = getattr(model_cfg, "config_path", None)
    arch = read_hf_config(path) if path else preset_architecture(model_cfg)
    check_dimensions(arch, f"model.config_path={path}" if path else f"model={model_cfg.name}")
    return arch


def check_dimensions(arch: Architecture, source: str) -> None:
    """Counting needs positive sizes and whole attention groups (kv heads dividing heads)."""
    sizes = {k: getattr(arch, k) for k in (*DIM_KEYS, "num_key_value_heads", "head_dim")}
    problems = [f"{source}: {k}={v} must be at least 1." for k, v in sizes.items() if v < 1]
    if not problems and arch.num_attention_heads % arch.num_key_value_heads:
        problems.append(f"{source}: num_attention_heads={arch.num_attention_heads} is not a multiple of "
                        f"num_key_value_heads={arch.num_key_value_heads}.")
    if problems:
        raise ConfigError(problems)


def preset_architecture(model_cfg) -> Architecture:
    heads = model_cfg.num_attention_heads
    return Architecture(model_type=model_cfg.model_type, vocab_size=model_cfg.vocab_size,
                        hidden_size=model_cfg.hidden_size, intermediate_size=model_cfg.intermediate_size,
                        num_hidden_layers=model_cfg.num_hidden_layers, num_attention_heads=heads,
                        num_key_value_heads=model_cfg.num_key_value_heads,
                        head_dim=model_cfg.hidden_size // max(heads, 1),
                        tie_word_embeddings=model_cfg.tie_word_embeddings,
                        attention_bias=model_cfg.attention_bias)


def read_hf_config(path: str) -> Architecture:
    """Read a causal LM's config.json (a file, or a folder holding one) as plain JSON: no torch, no download."""
    file = os.path.join(path, "config.json") if os.path.isdir(os.path.expanduser(path)) else path
    try:
        with open(os.path.expanduser(file)) as f:
            raw = json.load(f)
    except (OSError, ValueError) as err:
        raise ConfigError([f"model.config_path={path} cannot be read as a config.json ({err}). Give the path of a "
                           f"Hugging Face model's config.json, e.g. model.config_path=/models/my-llama/config.json."]
                          ) from None
    missing = [k for k in DIM_KEYS if k not in raw]
    kind = raw.get("model_type")
    if kind not in SUPPORTED_TYPES or missing:
        why = f"model_type {kind!r} is not one of {', '.join(SUPPORTED_TYPES)}" if kind not in SUPPORTED_TYPES \
            else f"it lacks {', '.join(missing)}"
        raise ConfigError([f"model.config_path={path} cannot be planned: {why}. Use a Llama, Mistral, Qwen2 or "
                           f"Qwen3 config.json, or a preset such as model=llama3-8b."])
    heads = raw["num_attention_heads"]
    return Architecture(model_type=kind, vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
                        intermediate_size=raw["intermediate_size"], num_hidden_layers=raw["num_hidden_layers"],
                        num_attention_heads=heads, num_key_value_heads=raw.get("num_key_value_heads") or heads,
                        head_dim=raw.get("head_dim") or raw["hidden_size"] // max(heads, 1),
                        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                        attention_bias=bool(raw.get("attention_bias", False)),
                        mlp_bias=bool(raw.get("mlp_bias", False)))


def linear_shapes(arch: Architecture) -> Dict[str, tuple]:
    """(in, out) of each Linear in one decoder layer."""
    h, f = arch.hidden_size, arch.intermediate_size
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, f),
            "up_proj": (h, f), "down_proj": (f, h)}


def layer_modules(arch: Architecture) -> Dict[str, List[int]]:
    """Each module of one decoder layer -> the numel of the parameter tensors it holds directly."""
    h = arch.hidden_size
    configurable = arch.model_type in ("llama", "qwen3") and arch.attention_bias  # Mistral has no biases at all
    qkv_bias, o_bias = arch.model_type == "qwen2" or configurable, configurable
    mlp_bias = arch.model_type == "llama" and arch.mlp_bias
    bias = {"q_proj": qkv_bias, "k_proj": qkv_bias, "v_proj": qkv_bias, "o_proj": o_bias, "gate_proj": mlp_bias,
            "up_proj": mlp_bias, "down_proj": mlp_bias}
    modules = {name: [fan_in * fan_out] + ([fan_out] if bias[name] else [])
               for name, (fan_in, fan_out) in linear_shapes(arch).items()}
    modules.update(input_layernorm=[h], post_attention_layernorm=[h])
    if arch.model_type == "qwen3":
        modules.update(q_norm=[arch.head_dim], k_norm=[arch.head_dim])
    return modules


def count_params(arch: Architecture) -> ParamCounts:
    modules = layer_modules(arch)
    embedding = arch.vocab_size * arch.hidden_size
    lm_head = 0 if arch.tie_word_embeddings else embedding
    per_layer = sum(sum(sizes) for sizes in modules.values())
    # The tied lm_head still holds the embedding matrix as its own module, so L_max sees it either way.
    largest = max([embedding] + [sum(sizes) for sizes in modules.values()])
    return ParamCounts(total=embedding + lm_head + per_layer * arch.num_hidden_layers + arch.hidden_size,
                       embedding=embedding, lm_head=lm_head, per_layer=per_layer,
                       num_layers=arch.num_hidden_layers, final_norm=arch.hidden_size,
                       largest_module=largest,
                       layer_tensors=tuple(n for sizes in modules.values() for n in sizes))


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
    shapes = linear_shapes(arch)
    tensors = tuple(n for t in targets for n in (r * shapes[t][0], shapes[t][1] * r))
    return AdapterCounts(total=sum(tensors) * arch.num_hidden_layers, largest=max(tensors, default=0),
                         layer_tensors=tensors, num_layers=arch.num_hidden_layers)


def describe_count(n: int) -> str:
    """1234567 -> '1.23M', for tables."""
    for unit, size in (("B", 10 ** 9), ("M", 10 ** 6), ("K", 10 ** 3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)

