"""The one resolve: overrides (and the files they name) to the run every command reads.

    run = resolve(["model=llama3-8b", "deepspeed.from_file=ds_z3.json", "zero=auto"])

Every command that takes overrides, and each sweep point, calls it: relative model and data paths made absolute,
the files users bring imported (each mapping printed), ModelConfig's quantization fields mapped onto peft.*, and the
`auto` choices replaced by auto-fit's winner. Nothing after it changes the config; the topology is built here once."""
import copy
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from trl_ds.check.accelerate_yaml import apply_accelerate
from trl_ds.check.deepspeed_json import apply_deepspeed_json
from trl_ds.check.lora_targets import family_targets
from trl_ds.check.plan_rows import RowCheck
from trl_ds.check.trl_recipe import apply_recipe
from trl_ds.config.compose import compose
from trl_ds.config.quantization import map_model_config_fields
from trl_ds.config.script_target import is_file_target
from trl_ds.config.topology import Topology, topology
from trl_ds.config.values import is_local_path
from trl_ds.errors import ConfigError
from trl_ds.plan.autofit import resolve as autofit

LOCAL_PATH_KEYS = (("trainer", "dataset_name"), ("trainer", "eval_dataset_name"), ("model", "name_or_path"))


@dataclass
class Run:
    cfg: object  # the resolved config (an OmegaConf DictConfig): read, never changed, after resolve
    command_line: List[str]  # the overrides it was composed from (they win over the files)
    topology: Topology
    lines: List[str] = field(default_factory=list)  # the files' mappings, printed before launch
    problems: List[str] = field(default_factory=list)  # the files' refusals, reported with the checks' problems
    autofit: Optional[dict] = None  # zero=auto, offload=auto, ...: the ranking and the choice
    open_cfg: object = None  # with auto-fit: the config before it chose (the planner's grid varies its auto choices)

    @property
    def text(self) -> Optional[str]:
        return "\n".join(self.lines) or None


def resolve(overrides: Sequence[str] = (), cfg=None, fit: str = "raise") -> Run:
    """The run `overrides` describe. cfg: the config Hydra's main already composed from them (the run command);
    fit: "raise" (a ConfigError when no auto candidate fits), "keep" (the plan: the open config stays current) or
    "off". The files' problems are returned, not raised: the launch reports them with the checks' own."""
    command_line = list(overrides)
    cfg = compose(command_line) if cfg is None else cfg
    lines, problems = import_files(cfg, command_line)
    absolute_local_paths(cfg)  # after the files: a recipe's model_name_or_path is the launching folder's too
    mapped, refused = map_model_config_fields(cfg, command_line)  # ModelConfig's bnb fields -> peft.*
    family = None if problems + refused else family_targets(cfg, command_line)  # BLOOM's query_key_value, ...
    lines += mapped + ([family] if family else [])
    run = Run(cfg=cfg, command_line=command_line, topology=topology(cfg), lines=lines, problems=problems + refused)
    if fit == "off":
        return run
    open_cfg = copy.deepcopy(cfg)
    try:
        run.autofit = autofit(cfg, RowCheck)  # the winner is set before anything reads the choices
    except ConfigError:
        if fit == "raise" and not run.problems:  # a refused file: its lines say why, not the fit it spoiled
            raise
    if run.autofit:
        run.open_cfg, run.topology = open_cfg, topology(cfg)  # tp=auto / sp=auto chose the sizes
    return run


def import_files(cfg, command_line: Sequence[str]):
    """The files users bring, each key set where the command line gives none: (lines, problems)."""
    lines, problems = [], []
    for importer in (apply_accelerate, apply_deepspeed_json, apply_recipe):
        found, refused = importer(cfg, command_line)
        lines, problems = lines + found, problems + refused
    return lines, problems


def absolute_local_paths(cfg) -> None:
    """Relative model and dataset paths made absolute from the folder the user launched from."""
    if cfg.get("script") and is_file_target(cfg.script):
        cfg.script = os.path.abspath(os.path.expanduser(cfg.script))
    for group, key in LOCAL_PATH_KEYS:
        name = cfg[group].get(key)
        if isinstance(name, str) and name != "tiny" and is_local_path(name) \
                and not os.path.isabs(os.path.expanduser(name)):
            cfg[group][key] = os.path.abspath(name)

