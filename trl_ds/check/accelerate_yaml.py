"""launcher.from_accelerate=config.yaml: start from an `accelerate launch --config_file` YAML.

Each key of it (and of its deepspeed_config_file, imported as deepspeed.from_file does) is mapped onto cluster,
launcher, zero, offload and precision; a num_processes unlike the cluster's world is refused with the numbers.
"""
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from trl_ds.check.deepspeed_json import ds_settings
from trl_ds.check.imported import Mapping, apply, load_yaml, read_mapping, show
from trl_ds.config.values import world_size
from trl_ds.plan.params import architecture

TOP = {"num_machines": "cluster.nodes", "machine_rank": "cluster.node_rank", "main_process_ip": "cluster.master_addr",
       "main_process_port": "cluster.master_port"}
PRECISION = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}
DEEPSPEED = {"zero_stage": "zero.stage", "offload_optimizer_device": "offload.optimizer",
             "offload_param_device": "offload.param", "offload_optimizer_nvme_path": "offload.optimizer_nvme_path",
             "offload_param_nvme_path": "offload.nvme_path",
             "zero3_save_16bit_model": "zero.stage3_gather_16bit_weights_on_model_save",
             "gradient_accumulation_steps": "trainer.gradient_accumulation_steps",
             "gradient_clipping": "trainer.max_grad_norm", "deepspeed_hostfile": "cluster.hostfile"}
# accelerate-only keys that change nothing in a DeepSpeed launch trl_ds makes, with the reason.
NOT_USED = {"compute_environment": "trl_ds starts the ranks itself (launcher=slurm for a cluster)",
            "debug": "accelerate's collective-operation checks", "main_training_function": "trl_ds's worker trains",
            "same_network": "the cluster's addresses decide", "downcast_bf16": "TPU only", "tpu_env": "TPU only",
            "tpu_use_cluster": "TPU only", "tpu_use_sudo": "TPU only", "gpu_ids": "ranks use their local GPU",
            "enable_cpu_affinity": "accelerate's NUMA pinning", "use_cpu": "cluster.device decides"}
# The blocks `accelerate config` writes empty for other distributed types; accelerate ignores them under DEEPSPEED.
EMPTY_UNUSED = {"fsdp_config": "empty (accelerate reads it for FSDP only)",
                "megatron_lm_config": "empty (accelerate reads it for Megatron-LM only)"}
RUNNERS = ("pdsh", "openmpi", "mpich", "impi", "mvapich", "slurm")


def accelerate_settings(conf: Dict[str, Any], folder: str, hidden, json_file: Optional[str] = None
                        ) -> Tuple[List[Mapping], List[str], List[str]]:
    """(mappings, notes, problems) for an accelerate config; folder: where a relative deepspeed_config_file is read
    from, the working folder as `accelerate launch` reads it (it passes the path on as ACCELERATE_DEEPSPEED_CONFIG_FILE
    and DeepSpeedPlugin opens it there)."""
    kind = conf.get("distributed_type", "NO")
    if kind != "DEEPSPEED":
        return [], [], [f"distributed_type: {kind}: trl_ds runs DeepSpeed ZeRO only (zero=stage0 is plain data "
                        f"parallelism like MULTI_GPU, zero=stage3 shards like FSDP). Use an accelerate config with "
                        f"distributed_type: DEEPSPEED, or give trl_ds's keys (zero=..., cluster=...) instead."]
    mappings, notes, problems = [], [], []
    for key, given in conf.items():
        if key == "main_process_port" and given == 0:
            notes.append("main_process_port: 0 not used: a free port, as trl_ds's own single-node launch picks")
        elif key == "compute_environment" and given != "LOCAL_MACHINE":
            problems.append(f"compute_environment: {given}: trl_ds launches on machines it can reach (torchrun, "
                            f"deepspeed, slurm); use LOCAL_MACHINE.")
        elif key in TOP:
            mappings.append(Mapping(key, given, TOP[key], given))
        elif key == "mixed_precision":
            _precision(given, mappings, problems)
        elif key == "rdzv_backend":
            (mappings.append(Mapping(key, given, "launcher.rdzv_backend", given)) if given in ("static", "c10d")
             else problems.append(f"rdzv_backend: {given}: trl_ds's torchrun meets by static or c10d."))
        elif key == "deepspeed_config":
            found, noted, refused = _deepspeed(given, folder, hidden, conf.get("num_machines", 1) > 1, json_file)
            mappings, notes, problems = mappings + found, notes + noted, problems + refused
        elif key in NOT_USED or (key in ("dynamo_config", "dynamo_backend") and given in ({}, "NO")) or \
                (key in EMPTY_UNUSED and given in ({}, None)):
            why = NOT_USED.get(key, EMPTY_UNUSED.get(key, "no torch.compile"))
            notes.append(f"{key}: {show(given)} not used: {why}")
        elif key not in ("distributed_type", "num_processes"):
            problems.append(f"{key}: {show(given)}: trl_ds has no counterpart of this accelerate key; drop it.")
    return mappings, notes, problems


def _precision(given: Any, mappings: List[Mapping], problems: List[str]) -> None:
    if given in PRECISION:
        mappings.append(Mapping("mixed_precision", given, "precision.dtype", PRECISION[given]))
    else:
        problems.append(f"mixed_precision: {given}: trl_ds trains in fp32, bf16 or fp16 (precision=...).")


def _deepspeed(block: Dict[str, Any], folder: str, hidden, multinode: bool, json_file: Optional[str] = None):
    """json_file: a deepspeed.from_file beside the YAML, which wins over its DeepSpeed keys (one line says so)."""
    mappings, notes, problems = [], [], []
    if json_file:
        given = [k for k in block if k in DEEPSPEED and k != "deepspeed_hostfile" or k == "deepspeed_config_file"]
        block = {k: v for k, v in block.items() if k not in given}
        notes += [f"deepspeed_config: {', '.join(given)} not used: deepspeed.from_file={json_file} wins (it holds "
                  f"the DeepSpeed settings, as accelerate's deepspeed_config_file would)"] if given else []
    if "deepspeed_config_file" in block:
        mappings, notes, problems = _config_file(block["deepspeed_config_file"], folder, hidden)
    for key, given in block.items():
        where = f"deepspeed_config.{key}"
        if key == "deepspeed_config_file":
            continue
        if key in DEEPSPEED and "deepspeed_config_file" in block and key != "deepspeed_hostfile":
            problems.append(f"{where}: {show(given)}: beside deepspeed_config_file accelerate refuses it (the JSON "
                            f"holds it); move it into the JSON.")
        elif key in DEEPSPEED:
            mappings.append(Mapping(where, given, DEEPSPEED[key], given))
        elif key == "deepspeed_multinode_launcher" and multinode:
            name = "torchrun" if given == "standard" else "deepspeed"
            mappings.append(Mapping(where, given, "launcher.name", name))
            mappings += [Mapping(where, given, "launcher.multinode_runner", given)] if given in RUNNERS else []
        elif key == "deepspeed_multinode_launcher":
            notes.append(f"{where}: {given} not used: one machine (num_machines 1)")
        elif key == "zero3_init_flag":
            notes.append(f"{where}: {show(given)}: at stage 3 transformers loads the model under "
                         f"deepspeed.zero.Init (partitioned as it loads) whatever this flag says")
        else:
            problems.append(f"{where}: {show(given)}: trl_ds has no counterpart; drop it.")
    if block.get("zero_stage") in (1, 2) and "deepspeed_config_file" not in block:
        # the plugin writes no overlap_comm: DeepSpeed's default (off below stage 3) applies
        mappings.append(Mapping("(DeepSpeed's default) overlap_comm", False, "zero.overlap_comm", False))
    return mappings, notes, problems


def _config_file(path: str, folder: str, hidden) -> Tuple[List[Mapping], List[str], List[str]]:
    import json

    full = os.path.join(folder, os.path.expanduser(path))  # relative to the working folder, as accelerate opens it
    where = f"deepspeed_config.deepspeed_config_file={path}"
    ds, problems = read_mapping(full, where, "a DeepSpeed JSON file", json.load)
    found, notes, refused = ds_settings(ds, hidden)
    return found, notes, problems + [f"{where}: {p}" for p in refused]


def world_problem(conf: Dict[str, Any], world: int) -> List[str]:
    wanted = conf.get("num_processes")
    if wanted is None or conf.get("distributed_type") != "DEEPSPEED" or wanted == world:
        return []
    nodes = conf.get("num_machines", 1)
    return [f"num_processes: {wanted} is not this cluster's world {world} (cluster.nodes × cluster.gpus_per_node). "
            f"Choose a cluster of {wanted} ranks (e.g. cluster.nodes={nodes} cluster.gpus_per_node="
            f"{wanted // max(1, nodes)}), or change num_processes."]


def apply_accelerate(cfg, command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    path = cfg.launcher.get("from_accelerate")
    if not path:
        return [], []
    where = f"launcher.from_accelerate={path}"
    conf, problems = read_mapping(path, where, "an accelerate config YAML file", load_yaml)
    if problems:  # unread: no key to judge (an empty mapping would read as distributed_type NO)
        return [], problems
    mappings, notes, refused = accelerate_settings(conf, os.getcwd(), lambda: architecture(cfg.model).hidden_size,
                                                   (cfg.deepspeed or {}).get("from_file"))
    lines, not_set = apply(cfg, where, mappings, notes, command_line)
    refused += world_problem(conf, world_size(cfg))
    return lines, problems + [f"{where}: {p}" for p in refused] + not_set
