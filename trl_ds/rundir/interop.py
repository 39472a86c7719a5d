"""Files for people who launch with their own tools: accelerate.yaml, and the "auto" flavour of ds_config.json. The
DeepSpeed JSON is referenced, not restated, so `accelerate launch --config_file accelerate.yaml` cannot disagree.
"""
import copy
import os
from typing import Any, Dict

import yaml

from trl_ds.config.topology import topology
from trl_ds.config.values import sp_size, value, world_size
from trl_ds.rundir.layout import ACCELERATE_YAML, DS_CONFIG, TINY_MODEL_DIR, TRAINER_YAML, write_json, write_text
from trl_ds.rundir.trainer_config import nvme_blocks, relative_to_run_dir, run_dir_relative_args

# Keys Hugging Face's Trainer fills from its TrainingArguments when they hold "auto" (HfTrainerDeepSpeedConfig).
AUTO_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
             "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
             "bf16.enabled", "fp16.enabled")


def build_accelerate_config(cfg, run_dir: str) -> Dict[str, Any]:
    """accelerate's ClusterConfig for DeepSpeed with our ds_config.json; no mixed_precision: with a
    deepspeed_config_file accelerate refuses one (the JSON's bf16/fp16 blocks decide)."""
    c = cfg.cluster
    config: Dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
        "deepspeed_config": {"deepspeed_config_file": os.path.join(run_dir, DS_CONFIG),
                             "deepspeed_multinode_launcher": "standard",  # torchrun on each node, as trl_ds launches
                             "zero3_init_flag": cfg.zero.stage == 3},
        "machine_rank": c.node_rank, "num_machines": c.nodes,
        "num_processes": world_size(cfg),  # all ranks of all nodes, as accelerate counts them
        "rdzv_backend": "static", "same_network": True, "use_cpu": False, "debug": False,
        "main_training_function": "main",
    }
    if c.nodes > 1:
        config.update(main_process_ip=c.master_addr, main_process_port=c.master_port)
    else:
        config["main_process_port"] = 0  # a free port, as trl_ds's own single-node launch: parallel runs never collide
    if sp_size(cfg) > 1:
        config["parallelism_config"] = _parallelism_block(cfg)
    return config


def _parallelism_block(cfg) -> Dict[str, Any]:
    """Ulysses as accelerate's parallelism_config: sp ranks share a sequence, ZeRO shards over the rest."""
    topo = topology(cfg)
    block = {"dp_replicate_size": 1, "dp_shard_size": topo.data_parallel, "sp_size": topo.sp_size,
             "sp_backend": "deepspeed", "sp_seq_length_is_variable": True,
             "sp_attn_implementation": cfg.sp.attn_implementation}
    return {f"parallelism_config_{k}": v for k, v in block.items()}


def parallelism_config(cfg):
    """The same settings as an accelerate ParallelismConfig object, for the worker's trainer args."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedSequenceParallelConfig

    handler = DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=True,
                                              sp_attn_implementation=cfg.sp.attn_implementation)
    topo = topology(cfg)
    return ParallelismConfig(dp_replicate_size=1, dp_shard_size=topo.data_parallel, sp_size=topo.sp_size,
                             sp_backend="deepspeed", sp_handler=handler)


def auto_ds_config(ds_config: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON with "auto" where Hugging Face's Trainer fills values from its own arguments."""
    auto = copy.deepcopy(ds_config)
    for dotted in AUTO_KEYS:
        *parents, leaf = dotted.split(".")
        node = auto
        for key in parents:
            node = node.get(key, {})
        if leaf in node:
            node[leaf] = "auto"
    return auto


def model_note(cfg) -> str:
    """The built-in tiny model is saved into the run dir by the first rank of a real run, not by a dry run."""
    if cfg.model.name_or_path:
        return ""
    return (f"# First train once with trl_ds (bash launch.sh, or the same command without dry_run=true): that writes "
            f"the model folder {TINY_MODEL_DIR}/ named below.\n")


def write_interop_files(cfg, folder: str, ds_config: Dict[str, Any], trainer_args: Dict[str, Any],
                        run_dir: bool = False) -> None:
    """ds_config.json, trainer.yaml and accelerate.yaml: what `trl <cmd>` and `accelerate launch` read. run_dir:
    paths inside the folder are written "./...", so a copied run dir is independent (run from the run dir)."""
    command = value(cfg.trainer.name)
    machine_rank = " --machine_rank NODE_RANK" if cfg.cluster.nodes > 1 else ""
    accelerate = build_accelerate_config(cfg, folder)
    where = ""
    if run_dir:
        ds_config, trainer_args = relative_nvme(ds_config, folder), run_dir_relative_args(trainer_args, folder)
        block = accelerate["deepspeed_config"]
        block["deepspeed_config_file"] = relative_to_run_dir(block["deepspeed_config_file"], folder)
        where = "cd RUN_DIR && "
    write_json(os.path.join(folder, DS_CONFIG), ds_config)
    write_text(os.path.join(folder, TRAINER_YAML),
               f"# {where}trl {command} --config trainer.yaml   (TRL's own argument names; it launches with "
               f"accelerate.yaml){RELATIVE_NOTE if run_dir else ''}\n" + model_note(cfg)
               + yaml.safe_dump(trainer_args, sort_keys=False))
    write_text(os.path.join(folder, ACCELERATE_YAML),
               f"# {where}accelerate launch --config_file accelerate.yaml{machine_rank} YOUR_SCRIPT.py   (this run's "
               f"DeepSpeed setup)\n" + yaml.safe_dump(accelerate, sort_keys=False))


RELATIVE_NOTE = "\n# Paths starting with ./ are relative to the run dir (this file's folder): run TRL's CLI from there."


def relative_nvme(ds_config: Dict[str, Any], folder: str) -> Dict[str, Any]:
    """The JSON with NVMe swap paths inside the run dir written "./..." (ranks resolve them: in_run_dir)."""
    ds_config = copy.deepcopy(ds_config)
    for block in nvme_blocks(ds_config):
        block["nvme_path"] = relative_to_run_dir(block["nvme_path"], folder)
    return ds_config
