"""The one way trl_ds counts a model: transformers builds it from the config on the meta device (no memory, no
weights, no download), and the parameters are read off the modules as DeepSpeed sees them. Imports torch, so
params.py keeps each result by config (count_cache.py).

An entry holds what the estimates read: every module's tensors, the embedding, the untied lm_head, each layer's
routed experts, the config as transformers resolves it, and the first decoder layer's Linears by short name.
"""
import json
import re
from typing import Dict, List

from trl_ds.errors import ConfigError

EXPERTS = re.compile(r"^(.*?\.experts)(\.|$)")  # a layer's routed experts, by module name
# transformers' and torch's refusals of a config: nn.Embedding asserts a pad_token_id inside the vocabulary,
# reformer's layers index their kinds' list, zamba2's divide by head counts, torch refuses negative sizes
REFUSALS = (ValueError, KeyError, TypeError, AttributeError, ImportError, AssertionError, IndexError,
            ZeroDivisionError, NotImplementedError, RuntimeError)


def meta_model(raw: dict):
    """(config, model) on the meta device, or ConfigError when transformers cannot build it."""
    import torch
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = dict(raw)
    kind = raw.pop("model_type")
    try:
        config = AutoConfig.for_model(kind, **raw)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (*REFUSALS, StrictDataclassError) as err:
        said = next((line for line in str(err).splitlines() if line.strip()), "")  # timm's starts with a newline
        raise ConfigError([f"model_type {kind!r} is not a causal LM that transformers can build here "
                           f"({type(err).__name__}: {said[:200]}), so its size is unknown. "
                           f"Name a causal LM's folder or hub id (model.name_or_path=...) or its config.json "
                           f"(model.config_path=...)."]) from None
    if hasattr(type(config), "allow_global_per_layer_attribute_access"):  # gemma4's head_dim differs by layer
        config.allow_global_per_layer_attribute_access = True  # kind: the estimates read the config's own value
    return config, model


def count(raw: dict):
    """(transformers' config, the entry: config, modules, embedding, lm_head, experts, linears)."""
    config, model = meta_model(raw)
    modules: Dict[str, List[int]] = {}
    for name, p in model.named_parameters():  # already without the tied duplicates
        modules.setdefault(name.rsplit(".", 1)[0], []).append(p.numel())
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    return config, {"config": json.loads(config.to_json_string(use_diff=False)),
            "modules": list(modules.values()), "embedding": embedding.numel(),
            "lm_head": 0 if head is None or head.weight is embedding else head.weight.numel(),
            "experts": routed_groups(modules), "linears": first_layer_linears(model, config)}


def routed_groups(modules: Dict[str, List[int]]) -> List[int]:
    """The numel of each layer's routed experts (fused or a ModuleList), one group per layer."""
    groups: Dict[str, int] = {}
    for name, sizes in modules.items():
        found = EXPERTS.match(name)
        if found:
            groups[found[1]] = groups.get(found[1], 0) + sum(sizes)
    return list(groups.values())


def first_layer_linears(model, config) -> Dict[str, list]:
    """(in, out) of each Linear (or GPT-2's Conv1D, whose weight is in × out) in the first decoder layer, by the short
    name PEFT targets (the last of a name: GPT-2's mlp.c_proj after its attn.c_proj); the decoder layers are the
    first ModuleList as long as the config's num_hidden_layers."""
    import torch

    layers = getattr(config, "num_hidden_layers", None)
    stack = next((name for name, m in model.named_modules()
                  if isinstance(m, torch.nn.ModuleList) and len(m) == layers), None)
    out: Dict[str, list] = {}
    for name, m in model.named_modules() if stack is not None else ():
        if not name.startswith(f"{stack}.0."):
            continue
        if isinstance(m, torch.nn.Linear):
            out[name.rsplit(".", 1)[-1]] = [m.in_features, m.out_features]
        elif type(m).__name__ == "Conv1D":
            out[name.rsplit(".", 1)[-1]] = list(m.weight.shape)
    return out
