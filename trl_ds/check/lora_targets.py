"""peft.target_modules against the model the run trains (its decoder layer's modules, from its config.json), and the
family's own default where trl_ds's (Llama's q/k/v/o_proj) does not apply: PEFT's default for its model_type,
read from the installed peft/utils/constants.py without importing PEFT (which imports torch).
"""
import ast
import functools
import importlib.util
import os
from typing import Dict, List, Optional, Sequence, Tuple

from trl_ds.check.imported import given_by_name, given_keys
from trl_ds.config.schema import PeftConfig
from trl_ds.config.values import value
from trl_ds.plan.params import architecture, layer_modules

MAPPING = "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"


@functools.lru_cache(maxsize=1)
def peft_defaults() -> Dict[str, Tuple[str, ...]]:
    """{model_type: PEFT's default LoRA targets}, from the installed PEFT's constants.py ({} without PEFT)."""
    spec = importlib.util.find_spec("peft")
    if spec is None or not spec.submodule_search_locations:
        return {}
    with open(os.path.join(spec.submodule_search_locations[0], "utils", "constants.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == MAPPING for t in node.targets):
            return {k: tuple(v) for k, v in ast.literal_eval(node.value).items()}
    return {}


def model_label(model_cfg) -> str:
    if model_cfg.get("name_or_path"):
        return f"model.name_or_path={model_cfg.name_or_path}"
    return f"model={model_cfg.name}"


def family_targets(cfg, command_line: Sequence[str]) -> Optional[str]:
    """PEFT's default targets for the family where trl_ds's name none of its modules; the line, or None."""
    if value(cfg.peft.name) == "none" or given_by_name("peft.target_modules", given_keys(command_line)):
        return None
    if list(cfg.peft.target_modules) != PeftConfig().target_modules:
        return None
    arch = architecture(cfg.model)
    modules = layer_modules(arch)
    if all(t in modules for t in cfg.peft.target_modules):
        return None
    family = peft_defaults().get(arch.model_type)
    if not family or not all(t.rsplit(".", 1)[-1] in modules for t in family):
        return None  # the check names the modules there are
    cfg.peft.target_modules = list(family)
    return (f"trl_ds: {model_label(cfg.model)} is a {arch.model_type} model, without "
            f"{', '.join(PeftConfig().target_modules)}: peft.target_modules=[{','.join(family)}], PEFT's own default "
            f"for {arch.model_type}")


def target_problems(cfg) -> List[str]:
    """Each named target must be a Linear (or Conv1D) of the model's decoder layer."""
    p = cfg.peft
    if value(p.name) == "none":
        return []
    modules = list(layer_modules(architecture(cfg.model)))
    unknown = [m for m in p.target_modules if m.rsplit(".", 1)[-1] not in modules]
    if not unknown and p.target_modules:
        return []
    shown = f"[{','.join(p.target_modules)}]"
    return [f"peft.target_modules={shown} must name linear layers of {model_label(cfg.model)}; "
            f"{', '.join(unknown) or 'none given'} is not one. Use some of: peft.target_modules=[{','.join(modules)}]."]
