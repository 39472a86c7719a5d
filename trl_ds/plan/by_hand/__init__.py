"""Families counted from their config by hand-written per-module formulas, torch-free, where no shape template fits
(trl_ds/plan/shape_templates.py): what a layer holds depends on its position, on a list's items rather than their
count, or on a size the config class derives. Each module here names the model_types it counts (TYPES) and gives
    settings(raw) -> the values its formulas read, or None where the meta device must decide (a config transformers
                     refuses, or one the formulas were not written for),
    modules(c)    -> module name -> numel of each tensor the module holds directly, as the meta device builds them,
    attribute(c, name) -> what getattr(config, name) gives for the names the planner reads,
and EMBEDDING, LM_HEAD (module names) where they are not model.embed_tokens and lm_head. Every module is held to a
meta-device build by its test (tests/unit/test_by_hand_*.py).
"""
import importlib
import pkgutil
import re
from typing import Dict, List

EXPERTS = re.compile(r"^(.*?\.experts)(\.|$)")  # as the meta count groups them: fused, or a ModuleList of experts


def counted(raw: dict):
    """(the family's module, its settings, its modules) where a module here counts the config, else None."""
    family = FAMILIES.get(raw.get("model_type"))
    c = family.settings(raw) if family is not None else None
    return None if c is None else (family, c, family.modules(c))


def routed_groups(held: Dict[str, List[int]]) -> List[int]:
    """The numel of each layer's routed experts."""
    groups: Dict[str, int] = {}
    for name, sizes in held.items():
        found = EXPERTS.match(name)
        if found:
            groups[found[1]] = groups.get(found[1], 0) + sum(sizes)
    return list(groups.values())


def embedding_and_head(family, held: Dict[str, List[int]]) -> tuple:
    """(the input embedding's numel, the untied lm_head's or 0)."""
    return (held[getattr(family, "EMBEDDING", "model.embed_tokens")][0],
            held.get(getattr(family, "LM_HEAD", "lm_head"), [0])[0])


def linear(out: Dict[str, List[int]], name: str, fan_in: int, fan_out: int, bias: bool = False) -> None:
    """nn.Linear(fan_in, fan_out): its weight, and its bias where it has one."""
    out[name] = [fan_in * fan_out] + ([fan_out] if bias else [])


def over_defaults(raw: dict, defaults: dict) -> dict:
    """The config's values over the class defaults (a key given as None takes the default)."""
    return {k: raw[k] if raw.get(k) is not None else v for k, v in defaults.items()}


FAMILIES = {t: m for m in (importlib.import_module(f"{__name__}.{i.name}") for i in pkgutil.iter_modules(__path__)
                                   if not i.name.startswith("_")) for t in m.TYPES}  # last: they import the above
