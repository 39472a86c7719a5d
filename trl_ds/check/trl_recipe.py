"""trainer.from_trl_config=recipe.yaml: start from a `trl <cmd> --config` YAML.

What trl_ds owns is mapped onto its keys (each mapping printed), the rest goes to trainer.args and through the same
check as arguments given by name; what cannot be honoured is refused with the reason. Keys set on the command line
win over the recipe's.
"""
import dataclasses
import os
from typing import Any, Dict, List, Sequence, Tuple

import yaml
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from trl_ds.check.trl_arguments import OWNED
from trl_ds.config.schema import TrainerConfig

RENAMED = {"model_name_or_path": "model.name_or_path", "seed": "seed", "save_steps": "checkpoint.every_steps",
           "save_total_limit": "checkpoint.keep_last", "lora_r": "peft.r", "lora_alpha": "peft.lora_alpha",
           "lora_dropout": "peft.lora_dropout", "lora_target_modules": "peft.target_modules"}
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
NOT_USED = {"output_dir": "trl_ds writes into the run dir (hydra.run.dir)",
            "accelerate_config": "trl_ds starts the ranks itself (launcher=...)"}
NOT_TRAINER_KEYS = {"name", "args", "from_trl_config", "eval_dataset_name"}


def recipe_settings(recipe: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """({trl_ds key: value}, notes on keys not used, problems), for a recipe's arguments."""
    trainer_keys = {f.name for f in dataclasses.fields(TrainerConfig)} - NOT_TRAINER_KEYS
    settings: Dict[str, Any] = {}
    notes, problems = [], []
    for name, value in recipe.items():
        if name in trainer_keys:
            settings[f"trainer.{name}"] = value
        elif name in RENAMED:
            settings[RENAMED[name]] = value
        elif name in ("bf16", "fp16"):
            settings.update({"precision.dtype": name} if value else {})
        elif name in ("dtype", "torch_dtype") and value in DTYPES:
            settings["precision.dtype"] = DTYPES[value]
        elif name in ("dtype", "torch_dtype") and value == "auto":
            notes.append(f"{name}: auto → precision=auto")
        elif name == "use_peft":
            settings.update({"peft.name": "lora"} if value else {})
        elif name == "save_strategy" and value in ("no", "steps"):
            settings.update({"checkpoint.every_steps": 0} if value == "no" else {})
        elif name in NOT_USED:
            notes.append(f"{name}: {value} not used: {NOT_USED[name]}")
        elif name in OWNED or name in ("dtype", "torch_dtype"):
            problems.append(f"{name}: {value} cannot be honoured: trl_ds sets {name} from "
                            f"{OWNED.get(name, 'precision').format(value=value)}. Drop it from the recipe.")
        else:
            settings[f"trainer.args.{name}"] = value
    if "model_name_or_path" in recipe:
        notes.append("model_name_or_path: the memory plan reads the dimensions of model=<preset> (or "
                     "model.config_path): pick the one of this model")
    if "num_train_epochs" in recipe and "max_steps" not in recipe:
        settings["trainer.max_steps"] = -1  # TRL's default: the epochs decide
    return settings, notes, problems


def apply_recipe(cfg, command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Set the recipe's values into cfg where the command line did not: (the printed mapping lines, problems)."""
    path = cfg.trainer.from_trl_config
    if not path:
        return [], []
    recipe, problems = _read(path)
    settings, notes, refused = recipe_settings(recipe)
    problems += [f"trainer.from_trl_config={path}: {p}" for p in refused]
    given = [o.lstrip("+~").split("=", 1)[0] for o in command_line]
    lines = [f"trl_ds: trainer.from_trl_config={path}:"]
    for key, value in settings.items():
        if any(key == g or key.startswith(g + ".") for g in given):
            lines.append(f"  {key}={value} (recipe) overridden on the command line")
            continue
        try:
            with open_dict(cfg):
                OmegaConf.update(cfg, key, value, merge=False)
        except (OmegaConfBaseException, ValueError) as err:
            problems.append(f"trainer.from_trl_config={path}: {key}={value}: {str(err).splitlines()[0]}")
            continue
        lines.append(f"  {key}={_show(value)}")
    return lines + [f"  {n}" for n in notes], problems


def _read(path: str) -> Tuple[Dict[str, Any], List[str]]:
    where = f"trainer.from_trl_config={path}"
    if not os.path.isfile(os.path.expanduser(path)):
        return {}, [f"{where} does not exist. Give a `trl <cmd> --config` YAML file."]
    try:
        with open(os.path.expanduser(path)) as f:
            recipe = yaml.safe_load(f)
    except yaml.YAMLError as err:
        return {}, [f"{where} is not YAML ({str(err).splitlines()[0]})."]
    if not isinstance(recipe, dict):
        return {}, [f"{where} holds no arguments (a YAML mapping of TRL argument names to values)."]
    return recipe, []


def _show(x: Any) -> str:
    return f"[{','.join(map(str, x))}]" if isinstance(x, list) else str(x).lower() if isinstance(x, bool) else str(x)
