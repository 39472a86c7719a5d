"""What a user's script receives on each rank: the run dir's configuration by the convention its parser follows.

- TrlParser script: `--config <run dir>/script_config.yaml`, trainer.yaml with its "./" paths made absolute and
  without `accelerate_config` (a TrlParser with fail_with_unknown_args=True would refuse it).
- HfArgumentParser script: trainer.yaml's TrainingArguments fields as `--name value` flags.
- HfArgumentParser script that parses only its own file or dict: its script_args, the TrainingArguments applied under
  its own values (worker/script.py under_its_own_values).
- Any other script: nothing but its own script_args, which come last in every case, over what trl_ds passes."""
import dataclasses
import json
import os
from typing import Any, Dict, List

import yaml

from trl_ds.config.script_target import HF_PARSER, TRL_PARSER
from trl_ds.rundir.layout import DS_CONFIG, TRAINER_YAML, read_json, write_json, write_text
from trl_ds.rundir.trainer_config import RUN_DIR_PATHS, in_run_dir, is_run_dir_path, nvme_blocks

SCRIPT_CONFIG = "script_config.yaml"  # written on each rank from trainer.yaml (same content on every rank)
SCRIPT_DS_CONFIG = "script_ds_config.json"  # ds_config.json with NVMe paths absolute, only when it has "./" ones


def resolved_trainer_args(run_dir: str) -> Dict[str, Any]:
    """trainer.yaml as a script running anywhere must read it."""
    with open(os.path.join(run_dir, TRAINER_YAML)) as f:
        args = yaml.safe_load(f)
    args.pop("accelerate_config", None)
    for key in RUN_DIR_PATHS:
        if key in args and is_run_dir_path(args[key]):
            args[key] = os.path.normpath(os.path.join(run_dir, args[key]))
    args["deepspeed"] = deepspeed_path(run_dir)
    return args


def deepspeed_path(run_dir: str) -> str:
    """ds_config.json, or a copy whose NVMe swap paths inside the run dir are absolute."""
    ds_config = read_json(os.path.join(run_dir, DS_CONFIG))
    if not any(is_run_dir_path(block["nvme_path"]) for block in nvme_blocks(ds_config)):
        return os.path.join(run_dir, DS_CONFIG)
    path = os.path.join(run_dir, SCRIPT_DS_CONFIG)
    _atomic(path, lambda tmp: write_json(tmp, in_run_dir(ds_config, run_dir)))
    return path


def script_argv(kind: str, run_dir: str, script_args: List[str]) -> List[str]:
    """The script's sys.argv[1:]."""
    if kind == TRL_PARSER:
        path = os.path.join(run_dir, SCRIPT_CONFIG)
        text = yaml.safe_dump(resolved_trainer_args(run_dir), sort_keys=False)
        _atomic(path, lambda tmp: write_text(tmp, f"# trl_ds: trainer.yaml as the script reads it\n{text}"))
        return ["--config", path, *script_args]
    if kind == HF_PARSER:
        return training_flags(resolved_trainer_args(run_dir)) + list(script_args)
    return list(script_args)


def training_values(args: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments that transformers' TrainingArguments has (TRL-only names are not its fields), set ones only."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {name: val for name, val in args.items() if name in names and val is not None}


def training_flags(args: Dict[str, Any]) -> List[str]:
    """`--name value` for each argument that transformers' TrainingArguments has."""
    flags: List[str] = []
    for name, val in training_values(args).items():
        flags.append(f"--{name}")
        if isinstance(val, bool):
            flags.append(str(val).lower())
        elif isinstance(val, list):
            flags += [str(v) for v in val]
        else:
            flags.append(json.dumps(val) if isinstance(val, dict) else str(val))
    return flags


def _atomic(path: str, write) -> None:
    """Every rank writes the same file: each writes its own copy and renames it into place."""
    tmp = f"{path}.tmp-{os.getpid()}"
    write(tmp)
    os.replace(tmp, path)
