"""Every nothing-silent rule validate() runs for the keys a user adds: the names (at once, no deepspeed import), the
DeepSpeed features' stage and offload needs, ModelConfig's LoRA options without peft=lora, and DeepSpeed's own
verdict on the built ds_config.json when the config goes beyond trl_ds's keys."""
from typing import List

from trl_ds.check.deepspeed_features import check_bf16_options, check_offload_ratio, check_zenflow, check_zeropp_parts
from trl_ds.check.deepspeed_keys import check_deepspeed_block, check_undeclared_keys, check_zenflow_names
from trl_ds.check.deepspeed_verdict import deepspeed_verdict, needs_verdict
from trl_ds.check.trl_arguments import check_model_arguments
from trl_ds.config.batch import Batch
from trl_ds.config.values import world_size
from trl_ds.rundir.deepspeed_config import build_ds_config

DEEPSPEED_RULES = [check_undeclared_keys, check_deepspeed_block, check_zenflow_names, check_offload_ratio,
                   check_bf16_options, check_zeropp_parts, check_zenflow, check_model_arguments]


def deepspeed_problems(cfg, batch: Batch, run_dir: str) -> List[str]:
    """DeepSpeed's verdict (about 2 s: it imports deepspeed), only when something beyond trl_ds's keys is set."""
    if not needs_verdict(cfg):
        return []
    return deepspeed_verdict(cfg, build_ds_config(cfg, batch, run_dir), world_size(cfg))
