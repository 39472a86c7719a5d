"""Cross-group rules, checked in the launching process before any rank starts.

`validate` collects every problem into one ConfigError. Rules that depend on this machine (GPUs present, libaio,
a writable nvme_path, local model and data files) apply only when launching for real, not to dry runs.
"""
import ctypes.util
import os
import shutil
import subprocess
from typing import Callable, List

from .batch import Batch, resolve_batch
from .errors import ConfigError
from .values import dtype, is_local_path, nvme_path, offloads, value, world_size

LIBAIO_HEADER = "/usr/include/libaio.h"


def validate(cfg, run_dir: str, launching: bool) -> Batch:
    """Return the resolved batch, or raise one ConfigError listing every problem."""
    problems: List[str] = []
    for rule in RULES:
        problems += rule(cfg)
    batch = None
    try:
        batch = resolve_batch(cfg.trainer.per_device_train_batch_size, world_size(cfg),
                              cfg.trainer.gradient_accumulation_steps, cfg.batch.global_size)
    except ConfigError as err:
        problems += err.problems
    if launching:
        problems += check_local_files(cfg) + check_machine(cfg, run_dir)
    if problems:
        raise ConfigError(problems)
    return batch


def check_zero(cfg) -> List[str]:
    stage = cfg.zero.stage
    if stage not in (0, 1, 2, 3):
        return [f"zero.stage={stage} is not a ZeRO stage. Use zero=stage0, stage1, stage2 or stage3."]
    problems = []
    where = offloads(cfg)
    if where["param"] != "none" and stage != 3:
        problems.append(f"offload.param={where['param']} needs zero=stage3 (got zero.stage={stage}); DeepSpeed would "
                        f"silently ignore it. Use zero=stage3 or offload.param=none.")
    if where["optimizer"] == "nvme" and stage != 3:
        problems.append(f"offload.optimizer=nvme needs zero=stage3 (got zero.stage={stage}). "
                        f"Use zero=stage3 or offload.optimizer=cpu.")
    elif where["optimizer"] != "none" and stage == 0:
        problems.append(f"offload.optimizer={where['optimizer']} needs a ZeRO stage of 1 or more (got zero.stage=0). "
                        f"Use zero=stage2 or offload=none.")
    if stage == 3 and cfg.save_final_model and not cfg.zero.stage3_gather_16bit_weights_on_model_save:
        problems.append("save_final_model=true with zero=stage3 needs zero.stage3_gather_16bit_weights_on_model_save="
                        "true, or each rank saves only its partition. Set it to true, or save_final_model=false.")
    sizes = ["reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
             "stage3_max_live_parameters", "sub_group_size"]
    problems += [f"zero.{k}={cfg.zero[k]} must be positive." for k in sizes if cfg.zero[k] <= 0]
    problems += [f"zero.stage3_param_persistence_threshold={cfg.zero.stage3_param_persistence_threshold} "
                 f"must be 0 or more."] if cfg.zero.stage3_param_persistence_threshold < 0 else []
    return problems


def check_offload(cfg) -> List[str]:
    o = cfg.offload
    fields = {"offload.buffer_count": o.buffer_count, "offload.buffer_size": o.buffer_size,
              "offload.aio.block_size": o.aio.block_size, "offload.aio.queue_depth": o.aio.queue_depth,
              "offload.aio.intra_op_parallelism": o.aio.intra_op_parallelism}
    return [f"{k}={v} must be positive." for k, v in fields.items() if v <= 0]


def check_cluster(cfg) -> List[str]:
    c = cfg.cluster
    problems = [f"cluster.{k}={c[k]} must be at least 1." for k in ("nodes", "gpus_per_node") if c[k] < 1]
    if c.nodes >= 1 and not 0 <= c.node_rank < c.nodes:
        problems.append(f"cluster.node_rank={c.node_rank} is outside 0..{c.nodes - 1} for cluster.nodes={c.nodes}. "
                        f"Use cluster.node_rank=0 to {c.nodes - 1}.")
    if not 1 <= c.master_port <= 65535:
        problems.append(f"cluster.master_port={c.master_port} is not a TCP port. Use a value in 1..65535, "
                        f"e.g. cluster.master_port=29500.")
    return problems


def check_precision(cfg) -> List[str]:
    chosen = dtype(cfg)
    if value(cfg.cluster.device) == "cpu" and chosen != "fp32":
        return [f"precision={chosen} needs a GPU cluster (cluster.device=cpu here); trl_ds trains CPU runs in fp32. "
                f"Use precision=fp32 (or precision=auto) or a GPU cluster such as cluster=1x8."]
    return []


def check_trainer(cfg) -> List[str]:
    t = cfg.trainer
    problems = [f"trainer.{k}={t[k]} must be at least 1." for k in ("max_steps", "max_length", "logging_steps")
                if t[k] < 1]
    problems += [f"trainer.learning_rate={t.learning_rate} must be positive."] if t.learning_rate <= 0 else []
    return problems


def check_model(cfg) -> List[str]:
    m = cfg.model
    dims = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads")
    problems = [f"model.{k}={m[k]} must be at least 1." for k in dims if m[k] < 1]
    if not problems and (m.hidden_size % m.num_attention_heads or m.num_attention_heads % m.num_key_value_heads):
        problems.append(f"model.hidden_size={m.hidden_size}, num_attention_heads={m.num_attention_heads} and "
                        f"num_key_value_heads={m.num_key_value_heads} must divide evenly (hidden by heads, heads by "
                        f"kv heads).")
    return problems


def check_local_files(cfg) -> List[str]:
    problems = []
    path = cfg.model.name_or_path
    if path and is_local_path(path) and not os.path.isfile(os.path.join(os.path.expanduser(path), "config.json")):
        problems.append(f"model.name_or_path={path} is not a model folder (no config.json there). Give a folder "
                        f"written by save_pretrained, or a hub id such as model.name_or_path=Qwen/Qwen2.5-0.5B.")
    data = cfg.trainer.dataset_name
    if data != "tiny" and is_local_path(data) and not os.path.exists(os.path.expanduser(data)):
        problems.append(f"trainer.dataset_name={data} does not exist. Give an existing .jsonl/.json/.parquet file, "
                        f"a hub dataset name, or trainer.dataset_name=tiny.")
    return problems


def check_machine(cfg, run_dir: str) -> List[str]:
    """What this machine must have for a real launch."""
    problems = []
    if value(cfg.cluster.device) == "cuda":
        have = count_gpus()
        if have < cfg.cluster.gpus_per_node:
            problems.append(f"cluster={cfg.cluster.name} asks for {cfg.cluster.gpus_per_node} GPUs per node "
                            f"(cluster.gpus_per_node={cfg.cluster.gpus_per_node}) but this machine has {have}. "
                            f"Use dry_run=true to write the run dir only, cluster.gpus_per_node={have or 1}"
                            f"{'' if have else ' on a GPU machine'}, or cluster=local to train on CPU.")
    if "nvme" in offloads(cfg).values():
        problems += check_nvme(nvme_path(cfg, run_dir))
    return problems


def check_nvme(path: str) -> List[str]:
    problems = []
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or "."
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        problems.append(f"offload.nvme_path={path} is not writable ({existing} is not a writable folder). "
                        f"Set offload.nvme_path to a folder on a local NVMe drive that you can write.")
    if not (ctypes.util.find_library("aio") and os.path.exists(LIBAIO_HEADER)):
        problems.append("offload=nvme needs libaio for DeepSpeed's async_io op, and it is not installed here. "
                        "Install it with: apt-get install -y libaio-dev (or use offload=cpu).")
    return problems


def count_gpus() -> int:
    """GPUs visible here, without importing torch (nvidia-smi answers in milliseconds)."""
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


RULES: List[Callable] = [check_zero, check_offload, check_cluster, check_precision, check_trainer, check_model]
