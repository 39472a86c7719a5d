"""The planner's grid through the launch's own checks: a row stands for the user's config with the row's choices, and
it is planned only when check/validate.py accepts that config, so nothing the planner names is refused at launch.
"""
import copy
from typing import Dict, List, Tuple

from trl_ds.check.deepspeed_rules import deepspeed_problems
from trl_ds.check.validate import batch_problems, rule_problems
from trl_ds.config.topology import topology
from trl_ds.config.values import micro_batch
from trl_ds.plan.dimensions import set_sizes
from trl_ds.plan.memory import Setup
from trl_ds.plan.optimizer_places import partial_ratio

PLAN_RUN_DIR = "plan-run-dir"  # a run dir's path only names NVMe's default folder in the DeepSpeed JSON checked


def apply_setup(cfg, s: Setup) -> None:
    """Set a grid point's choices on `cfg` as the run command's overrides would (grid_overrides, ratio_overrides)."""
    cfg.zero.stage = s.stage
    cfg.offload.optimizer, cfg.offload.param = s.optimizer_offload, s.param_offload
    cfg.offload.ratio = partial_ratio(s)  # 1 where a ratio does not apply: the run command drops a typed one there
    cfg.zero.sub_group_size = s.sub_group_size
    cfg.trainer.per_device_train_batch_size = s.micro_batch
    cfg.trainer.gradient_checkpointing = s.gradient_checkpointing
    if (s.tp_size, s.sp_size) != (topology(cfg).tp_size, topology(cfg).sp_size):  # tp=auto / sp=auto rows
        set_sizes(cfg, s.tp_size, s.sp_size)
    cfg.precision.bf16_master_weights_and_grads, cfg.precision.bf16_optimizer_states = s.bf16_master, s.bf16_states


def config_problems(cfg) -> List[str]:
    """The launch's check of a config at dry-run level (check/validate.py without a run dir or this machine)."""
    problems = rule_problems(cfg)
    if micro_batch(cfg) is None:  # trainer.per_device_train_batch_size=auto: the grid's rows give it a value
        return problems
    batch, found = batch_problems(cfg)
    problems += found
    if batch is not None and not problems:
        problems += deepspeed_problems(cfg, batch, PLAN_RUN_DIR)
    return problems


class RowCheck:
    """`accepts(setup)`: whether the launch's check (dry-run level: no run dir, nothing of this machine) accepts the
    config `setup` stands for. The rules run once per tp × sp × stage × offload × ratio (no rule reads the micro-batch
    or checkpointing), the batch rules and DeepSpeed's verdict once per micro-batch too."""

    def __init__(self, cfg):
        self.cfg = copy.deepcopy(cfg)  # the caller's config is left as it is
        self.rules: Dict[Tuple, List[str]] = {}
        self.found: Dict[Tuple, List[str]] = {}

    def __call__(self, s: Setup) -> bool:
        return not self.problems(s)

    def problems(self, s: Setup) -> List[str]:
        key = (s.tp_size, s.sp_size, s.bf16_master, s.bf16_states, s.stage, s.optimizer_offload, s.param_offload,
               partial_ratio(s), s.sub_group_size, s.micro_batch)
        if key not in self.found:
            apply_setup(self.cfg, s)
            if key[:-1] not in self.rules:
                self.rules[key[:-1]] = rule_problems(self.cfg)
            batch, found = batch_problems(self.cfg)
            found = self.rules[key[:-1]] + found
            if batch is not None and not found:
                found = deepspeed_problems(self.cfg, batch, PLAN_RUN_DIR)
            self.found[key] = found
        return self.found[key]
