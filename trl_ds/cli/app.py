"""From a composed config to a written run dir: validate, build, write. No process is spawned here."""
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml
from omegaconf import OmegaConf

from trl_ds.check.imported import sources, with_sources
from trl_ds.check.plan_rows import RowCheck
from trl_ds.check.resolve import Run, resolve
from trl_ds.check.row_length import long_row_warning
from trl_ds.check.validate import validate
from trl_ds.config.batch import Batch
from trl_ds.config.script_target import is_file_target
from trl_ds.config.training_steps import training_steps
from trl_ds.config.values import brings_files, value
from trl_ds.errors import ConfigError
from trl_ds.launch import build_commands, write_launch_files
from trl_ds.launch.env import collect_env
from trl_ds.plan.memory import estimate, setup_from_config
from trl_ds.plan.planner import check_elastic_fit, check_fit, plan_for_run_dir
from trl_ds.plan.runtime import current_run, runs_json
from trl_ds.rundir.deepspeed_config import build_ds_config
from trl_ds.rundir.disk_space import space_warning
from trl_ds.rundir.interop import write_interop_files
from trl_ds.rundir.layout import (
    ENV,
    OVERRIDES,
    PLAN,
    RESOLVED_CONFIG,
    TINY_DATA_DIR,
    copy_script,
    nvme_path,
    write_json,
    write_text,
)
from trl_ds.rundir.trainer_config import build_trainer_args
from trl_ds.worker.data import write_tiny_dataset


@dataclass
class Prepared:
    run_dir: str
    batch: Batch
    ds_config: Dict[str, Any]
    trainer_args: Dict[str, Any]
    node_commands: List[List[str]]
    plan: Dict[str, Any] = field(default_factory=dict)  # plan.json: the memory estimate and the grid around it
    memory_warning: Optional[str] = None  # preflight.memory=warn and the estimate does not fit
    disk_warning: Optional[str] = None  # the checkpoints and final model may not fit on the run dir's disk
    data_warning: Optional[str] = None  # a data row far longer than trainer.max_length keeps
    autofit_text: Optional[str] = None  # zero=auto / offload=auto: the ranking and the choice, printed
    recipe_text: Optional[str] = None  # the files users bring: each key and where it went, printed
    run: Optional[Run] = None  # the one resolve's result (check/resolve.py) the rest was built from


def build(cfg, run_dir: str, launching: bool, command_line: Optional[List[str]] = None,
          shown: Optional[List[str]] = None) -> Prepared:
    """Validate (raises ConfigError with every problem), estimate memory (raises ConfigError for a config that
    cannot fit when preflight.memory is error) and build everything the run dir holds. Pure. command_line: the
    overrides cfg was composed from, where Hydra's main did not compose it (they win over imported files); shown: the
    user's part of them, which plan.json's run command keeps (trl-ds fit adds its own)."""
    command_line = task_overrides() if command_line is None else command_line
    run = resolve(command_line, cfg=cfg)  # the files, the local paths, auto-fit: as every command resolves them
    recipe_problems, autofit = run.problems, run.autofit
    try:
        batch = validate(cfg, run_dir, launching)
    except ConfigError as err:  # each value a file set is named with its file and key
        found = sources(run.lines)
        raise ConfigError(recipe_problems + [with_sources(p, found) for p in err.problems]) from None
    if recipe_problems:
        raise ConfigError(recipe_problems)
    setup = setup_from_config(cfg)
    memory = estimate(setup)
    accepts = RowCheck(cfg)  # the grid's rows (plan.json, a refusal's smallest change) as the launch checks them
    keyed = brings_files(command_line)  # a refusal's advice by key: it must win over the files given
    warning = check_fit(cfg, memory, launching, accepts, keyed) or check_elastic_fit(cfg, memory, launching)
    plan = plan_for_run_dir(cfg, memory, command_line if shown is None else shown, accepts)  # its run: keeps them
    plan["training"] = training_steps(cfg, batch)
    plan["whole_run"] = runs_json({"current": current_run(cfg, setup, plan["current"])})
    if autofit:
        plan["autofit"] = {k: v for k, v in autofit.items() if k != "text"}
    return Prepared(run_dir=run_dir, batch=batch, ds_config=build_ds_config(cfg, batch, run_dir),
                    trainer_args=build_trainer_args(cfg, batch, run_dir),
                    node_commands=build_commands(cfg, run_dir), plan=plan, memory_warning=warning,
                    disk_warning=space_warning(cfg, setup, run_dir) if launching else None,
                    data_warning=long_row_warning(cfg) if launching or cfg.dry_run else None,
                    autofit_text=autofit["text"] if autofit else None, recipe_text=run.text, run=run)


def task_overrides() -> List[str]:
    """The user's command-line overrides, for the run command plan.json recommends (none outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def write_run_dir(cfg, prepared: Prepared, overrides: List[str] = ()) -> None:
    run_dir = prepared.run_dir
    os.makedirs(run_dir, exist_ok=True)
    write_text(os.path.join(run_dir, RESOLVED_CONFIG), OmegaConf.to_yaml(cfg, resolve=True))
    write_text(os.path.join(run_dir, OVERRIDES), yaml.safe_dump(list(overrides)))
    write_interop_files(cfg, run_dir, prepared.ds_config, prepared.trainer_args, run_dir=True)
    write_launch_files(cfg, run_dir, prepared.node_commands)
    if cfg.get("script") and is_file_target(cfg.script):  # the ranks run this copy (worker/script.py)
        copy_script(cfg.script, run_dir)
    write_json(os.path.join(run_dir, ENV), collect_env(nvme_path(cfg, run_dir)))
    write_json(os.path.join(run_dir, PLAN), prepared.plan)
    if prepared.recipe_text:
        print(prepared.recipe_text)
    if prepared.autofit_text:
        print(prepared.autofit_text)
    for warning in (prepared.memory_warning, prepared.disk_warning, prepared.data_warning):
        if warning:
            print(f"trl_ds: warning: {warning}", file=sys.stderr)
    from trl_ds.check.trainer_rules import eval_notes  # settings harmless where they stand: printed, not refused
    for note in eval_notes(cfg):
        print(f"trl_ds: note: {note}")
    if "tiny" in (cfg.trainer.dataset_name, cfg.trainer.eval_dataset_name):
        write_tiny_dataset(os.path.join(run_dir, TINY_DATA_DIR), value(cfg.trainer.name))
