"""A base model quantized by bitsandbytes under LoRA (QLoRA): what peft.* asks for, and TRL's ModelConfig fields
(trainer.args or a recipe) moved onto those keys. peft=qlora is LoRA over a 4-bit base; peft.load_in_8bit=true an
8-bit one. The keys keep BitsAndBytesConfig's names.
"""
from typing import Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from trl_ds.config.values import dtype, value
from trl_ds.python_path import install_command

TORCH_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# TRL's ModelConfig field -> peft key (trl/trainer/utils.py get_quantization_config reads the former)
MODEL_CONFIG_FIELDS = {"load_in_4bit": "load_in_4bit", "load_in_8bit": "load_in_8bit",
                       "bnb_4bit_quant_type": "bnb_4bit_quant_type",
                       "use_bnb_nested_quant": "bnb_4bit_use_double_quant",
                       "bnb_4bit_quant_storage": "bnb_4bit_quant_storage"}
INSTALL = install_command("qlora", "bitsandbytes==0.50.2")  # a checkout's .venv, or pip's trl_ds[qlora]


def quantized_bits(cfg) -> int:
    """4 or 8 when peft asks for a bitsandbytes base, else 0 (the check refuses both at once)."""
    p = cfg.peft
    return 4 if p.get("load_in_4bit") else 8 if p.get("load_in_8bit") else 0


def training_dtype_name(cfg) -> str:
    return TORCH_NAMES[dtype(cfg)]


def compute_dtype(cfg) -> str:
    return cfg.peft.bnb_4bit_compute_dtype or training_dtype_name(cfg)


def quant_storage(cfg) -> str:
    """What the packed 4-bit weights are stored as: by default the training dtype, which ZeRO-3 needs."""
    return cfg.peft.bnb_4bit_quant_storage or training_dtype_name(cfg)


def model_config_fields(cfg) -> Dict[str, object]:
    """The quantization as TRL's ModelConfig names it, for trainer.yaml."""
    bits, p = quantized_bits(cfg), cfg.peft
    if bits == 8:
        return {"load_in_8bit": True, "dtype": training_dtype_name(cfg)}
    if bits != 4:
        return {}
    return {"load_in_4bit": True, "bnb_4bit_quant_type": value(p.bnb_4bit_quant_type),
            "use_bnb_nested_quant": bool(p.bnb_4bit_use_double_quant), "bnb_4bit_quant_storage": quant_storage(cfg),
            "dtype": compute_dtype(cfg)}


def map_model_config_fields(cfg, command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    """ModelConfig's quantization fields in trainer.args moved onto peft.*: (lines, problems)."""
    args = cfg.trainer.args or {}
    given = {o.lstrip("+~").split("=", 1)[0] for o in command_line}
    lines, problems = [], []
    for name in [n for n in MODEL_CONFIG_FIELDS if n in args]:
        key, shown = f"peft.{MODEL_CONFIG_FIELDS[name]}", _show(args[name])
        with open_dict(cfg):
            field_value = args[name]
            del cfg.trainer.args[name]
            if key in given:
                lines.append(f"  trainer.args.{name}={shown} → {key}: overridden on the command line")
                continue
            try:
                OmegaConf.update(cfg, key, field_value, merge=False)
            except (OmegaConfBaseException, ValueError) as err:
                problems.append(f"trainer.args.{name}={shown} (TRL's ModelConfig, trl_ds's {key}): "
                                f"{str(err).splitlines()[0]}")
                continue
        lines.append(f"  trainer.args.{name}={shown} → {key}={shown}")
    return (["trl_ds: TRL's ModelConfig quantization fields:", *lines] if lines else []), problems


def _show(x: Optional[object]) -> str:
    return "null" if x is None else str(x).lower() if isinstance(x, bool) else str(x)
