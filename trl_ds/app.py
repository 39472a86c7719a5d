"""From a composed config to a written run dir: validate, build, write. No process is spawned here."""
import os
from dataclasses import dataclass
from typing import Any, Dict, List

import yaml
from omegaconf import OmegaConf

from .batch import Batch
from .data import write_tiny_dataset
from .deepspeed_config import build_ds_config
from .env import collect_env
from .launch import build_commands, write_launch_files
from .rundir import RESOLVED_CONFIG, write_json, write_text
from .trainer_config import TINY_DATA_DIR, TRAINER_YAML, build_trainer_args
from .validate import validate


@dataclass
class Prepared:
    run_dir: str
    batch: Batch
    ds_config: Dict[str, Any]
    trainer_args: Dict[str, Any]
    node_commands: List[List[str]]


def build(cfg, run_dir: str, launching: bool) -> Prepared:
    """Validate (raises ConfigError with every problem) and build everything the run dir holds. Pure."""
    batch = validate(cfg, run_dir, launching)
    return Prepared(run_dir=run_dir, batch=batch, ds_config=build_ds_config(cfg, batch, run_dir),
                    trainer_args=build_trainer_args(cfg, batch, run_dir),
                    node_commands=build_commands(cfg, run_dir))


def write_run_dir(cfg, prepared: Prepared) -> None:
    run_dir = prepared.run_dir
    os.makedirs(run_dir, exist_ok=True)
    write_text(os.path.join(run_dir, RESOLVED_CONFIG), OmegaConf.to_yaml(cfg, resolve=True))
    write_json(os.path.join(run_dir, "ds_config.json"), prepared.ds_config)
    write_text(os.path.join(run_dir, TRAINER_YAML),
               "# trl sft --config trainer.yaml   (TRL's own argument names)\n"
               + yaml.safe_dump(prepared.trainer_args, sort_keys=False))
    write_launch_files(cfg, run_dir, prepared.node_commands)
    write_json(os.path.join(run_dir, "env.json"), collect_env())
    if cfg.trainer.dataset_name == "tiny":
        write_tiny_dataset(os.path.join(run_dir, TINY_DATA_DIR))
