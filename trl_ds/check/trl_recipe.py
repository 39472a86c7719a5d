"""trainer.from_trl_config=recipe.yaml: start from a `trl <cmd> --config` YAML. What trl_ds owns is mapped onto its
keys (each mapping printed), the rest goes to trainer.args and the same check as arguments given by name; what
cannot be honoured is refused with the reason. Keys given by name on the command line win (check/imported.py).
"""
import dataclasses
from typing import Any, Dict, List, Sequence, Tuple

from trl_ds.check.imported import Mapping, apply, load_yaml, read_mapping, show
from trl_ds.check.trl_arguments import OWNED, trainer_fields
from trl_ds.config.schema import TrainerConfig
from trl_ds.config.values import value

RENAMED = {"model_name_or_path": "model.name_or_path", "seed": "seed", "save_total_limit": "checkpoint.keep_last",
           "lora_r": "peft.r", "lora_alpha": "peft.lora_alpha", "lora_dropout": "peft.lora_dropout",
           "lora_target_modules": "peft.target_modules"}
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
NOT_USED = {"output_dir": "trl_ds writes into the run dir (hydra.run.dir)",
            "accelerate_config": "trl_ds starts the ranks itself (launcher=...)"}
NOT_TRAINER_KEYS = {"name", "args", "from_trl_config", "eval_dataset_name"}
# transformers' OptimizerNames that are torch's AdamW: trl_ds's ds_config.json has DeepSpeed's AdamW block, and with
# an optimizer block in the DeepSpeed config transformers ignores `optim` (deepspeed_optim_sched) anyway.
ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused", "adamw_hf",
         "adamw_apex_fused")
# Arguments older TRL / transformers took that the installed ones (trl 1.16, transformers 5) do not.
REMOVED = {"max_seq_length": "TRL renamed it max_length: write max_length: {value}",
           "overwrite_output_dir": "transformers 5 removed it; trl_ds writes a fresh run dir, or resumes it with "
                                   "resume=auto (resume=never starts over)",
           "warmup_ratio": "transformers 5 removed it; warmup_steps takes a fraction below 1: write warmup_steps: "
                           "{value}"}
SAVE_STEPS_DEFAULT = 500  # transformers' TrainingArguments.save_steps


def recipe_settings(recipe: Dict[str, Any]) -> Tuple[List[Mapping], List[str], List[str]]:
    """(mappings, notes on keys not used, problems), for a recipe's arguments."""
    trainer_keys = {f.name for f in dataclasses.fields(TrainerConfig)} - NOT_TRAINER_KEYS
    mappings: List[Mapping] = []
    notes, problems = [], []
    for name, given in recipe.items():
        special = _special(name, given, recipe)
        if special is not None:
            found, note, problem = special
            mappings += found
            notes += [note] if note else []
            problems += [problem] if problem else []
        elif name in trainer_keys:
            mappings.append(Mapping(name, given, f"trainer.{name}", given))
        elif name in RENAMED:
            mappings.append(Mapping(name, given, RENAMED[name], given))
        elif name in NOT_USED:
            notes.append(f"{name}: {given} not used: {NOT_USED[name]}")
        elif name in OWNED:
            problems.append(f"{name}: {given} cannot be honoured: trl_ds sets {name} from "
                            f"{OWNED[name].format(value=given)}. Drop it from the recipe.")
        else:
            mappings.append(Mapping(name, given, f"trainer.args.{name}", given))
    if "model_name_or_path" in recipe:
        notes.append("model_name_or_path: the memory plan reads the dimensions of model=<preset> (or "
                     "model.config_path): pick the one of this model")
    if "num_train_epochs" in recipe and "max_steps" not in recipe:
        mappings.append(Mapping("num_train_epochs", recipe["num_train_epochs"], "trainer.max_steps", -1))
    return mappings, notes, problems


def _special(name: str, given: Any, recipe: Dict[str, Any]):
    """(mappings, note, problem) for the arguments that need more than a rename; None for the others."""
    if name in REMOVED:
        return [], None, f"{name}: {given}: the installed TRL has no {name}: {REMOVED[name].format(value=given)}."
    if name in ("bf16", "fp16"):
        return [Mapping(name, given, "precision.dtype", name)] if given else [], None, None
    if name in ("dtype", "torch_dtype"):
        return _dtype(name, given)
    if name == "use_peft":
        return [Mapping(name, given, "peft.name", "lora")] if given else [], None, None
    if name == "optim":
        return _optim(given)
    if name in ("save_strategy", "save_steps"):
        return _save(name, given, recipe)
    return None


def _dtype(name: str, given: Any):
    if given in DTYPES:
        return [Mapping(name, given, "precision.dtype", DTYPES[given])], None, None
    if given is None or given == "auto":
        return [], f"{name}: {show(given)}: unset; precision=auto decides (bf16 on GPUs, fp32 on CPU)", None
    return [], None, (f"{name}: {given} cannot be honoured: trl_ds takes bfloat16, float16, float32, auto or null "
                      f"(precision=bf16|fp16|fp32|auto).")


def _optim(given: Any):
    if given in ADAMW:
        return [], (f"optim: {given}: AdamW, as ds_config.json's DeepSpeed AdamW optimizer block (with that block "
                    f"transformers trains it whatever optim says)"), None
    return [], None, (f"optim: {given} cannot be honoured: trl_ds trains with the AdamW block of ds_config.json, and "
                      f"with a DeepSpeed optimizer block transformers ignores optim, so {given} would silently train "
                      f"AdamW. Drop optim, or write optim: adamw_torch.")


def _save(name: str, given: Any, recipe: Dict[str, Any]):
    """transformers' save_strategy (default steps) and save_steps (default 500) onto trl_ds's checkpoint keys."""
    strategy = recipe.get("save_strategy", "steps")
    if name == "save_steps":
        if strategy != "steps":
            return [], f"save_steps: {given} not used: save_strategy is {strategy}", None
        return [Mapping(name, given, "checkpoint.every_steps", given)], None, None
    if given == "epoch":
        return [Mapping(name, given, "checkpoint.every_epoch", True),
                Mapping(name, given, "checkpoint.every_steps", 0)], None, None
    if given == "no":
        return [Mapping(name, given, "checkpoint.every_steps", 0)], None, None
    if given == "steps":
        every = SAVE_STEPS_DEFAULT if "save_steps" not in recipe else None
        return [Mapping(name, given, "checkpoint.every_steps", every)] if every else [], None, None
    return [], None, f"save_strategy: {given} cannot be honoured: trl_ds checkpoints by steps, epoch or no."


def as_parsed(m: Mapping, trainer: str) -> Mapping:
    """A single value for a list argument becomes the one-item list TrlParser makes of it."""
    if not m.key.startswith("trainer.args.") or isinstance(m.value, (list, dict)) or m.value is None:
        return m
    field = trainer_fields(trainer).get(m.key[len("trainer.args."):])
    if field is None or not str(field.annotation).lower().startswith("list"):
        return m
    return Mapping(m.source, m.given, m.key, [m.value])


def apply_recipe(cfg, command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Set the recipe's values into cfg where the command line did not: (the printed mapping lines, problems)."""
    path = cfg.trainer.from_trl_config
    if not path:
        return [], []
    where = f"trainer.from_trl_config={path}"
    recipe, problems = read_mapping(path, where, "a `trl <cmd> --config` YAML file", load_yaml)
    mappings, notes, refused = recipe_settings(recipe)
    mappings = [as_parsed(m, value(cfg.trainer.name)) for m in mappings]
    lines, not_set = apply(cfg, where, mappings, notes, command_line)
    return lines, problems + [f"{where}: {p}" for p in refused] + not_set
