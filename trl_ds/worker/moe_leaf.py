"""Mixture-of-experts blocks as ZeRO-3 leaf modules, on each rank before the engine exists.

ZeRO-3 gathers a module's parameters in its forward hook, so a rank whose tokens skip an expert would skip its hook
while another waits in its all-gather. A leaf module (deepspeed.utils.set_z3_leaf_modules) is gathered whole by one
hook. DeepSpeed's default covers Mixtral, Qwen2-MoE and Qwen3-MoE; MOE_BLOCKS adds the others.
"""
from typing import List

# model_type -> the class of its sparse MoE block in transformers
MOE_BLOCKS = {"mixtral": "MixtralSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock",
              "qwen3_moe": "Qwen3MoeSparseMoeBlock", "deepseek_v2": "DeepseekV2Moe", "deepseek_v3": "DeepseekV3MoE",
              "phimoe": "PhimoeSparseMoeBlock", "olmoe": "OlmoeSparseMoeBlock"}


def mark_moe_leaf_modules(model, ds_config: dict) -> List[str]:
    """Under ZeRO-3, mark the family's MoE block classes as leaf modules; the class names marked."""
    if (ds_config or {}).get("zero_optimization", {}).get("stage") != 3:
        return []
    wanted = MOE_BLOCKS.get(getattr(model.config, "model_type", None))
    classes = sorted({type(m) for m in model.modules() if type(m).__name__ == wanted}, key=lambda c: c.__name__)
    if classes:
        from deepspeed.utils import set_z3_leaf_modules

        set_z3_leaf_modules(model, classes)
    return [c.__name__ for c in classes]


def leaf_module_names(model) -> List[str]:
    """The classes DeepSpeed treats as ZeRO-3 leaf modules in this model (its _z3_leaf flag)."""
    return sorted({type(m).__name__ for m in model.modules() if getattr(m, "_z3_leaf", False)})
