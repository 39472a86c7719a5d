"""Cross-group rules, checked in the launching process before any rank starts.

`validate` collects every problem into one ConfigError. Rules that depend on this machine (GPUs, libaio, nvme_path,
local files missing) apply only when launching for real; the data files present here are read through in both."""
import ctypes.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Callable, List, Optional, Tuple

from trl_ds.check.argument_values import check_argument_values
from trl_ds.check.data_file import check_data_files
from trl_ds.check.deepspeed_rules import DEEPSPEED_RULES, deepspeed_problems
from trl_ds.check.hardware_values import check_hardware_values
from trl_ds.check.history import check_history
from trl_ds.check.quantization import check_bitsandbytes_here, check_quantization
from trl_ds.check.rendezvous import check_elastic_batch, check_rendezvous
from trl_ds.check.reuse import check_run_dir
from trl_ds.check.script import check_script
from trl_ds.check.tensor_parallel import check_tensor_parallel, check_tensor_parallel_resume
from trl_ds.check.trainer_rules import (
    check_eval,
    check_generation_batch,
    check_kto_batch,
    check_passthrough,
    check_peft,
    check_sequence_parallel,
    check_trainer_here,
    check_trainer_options,
)
from trl_ds.config.batch import Batch, resolve_batch
from trl_ds.config.values import data_parallel_world, dtype, is_local_path, micro_batch, offloads, value
from trl_ds.config.zero_offload import zero_offload_problems
from trl_ds.errors import ConfigError
from trl_ds.launch.hostfile import HOST_NAME
from trl_ds.launch.launchers import launcher_checks, launcher_of, ranks_run_here
from trl_ds.launch.script import ENV_NAME
from trl_ds.launch.slurm import check_slurm
from trl_ds.rundir.deepspeed_config import optimizer_nvme_path
from trl_ds.rundir.layout import nvme_path

LIBAIO_HEADER = "/usr/include/libaio.h"
IPV6 = re.compile(r"^[0-9A-Fa-f:]+$")


def validate(cfg, run_dir: str, launching: bool) -> Batch:
    """Return the resolved batch, or raise one ConfigError listing every problem."""
    problems = rule_problems(cfg)
    batch, more = batch_problems(cfg)
    problems += more + check_run_dir(cfg, run_dir) + check_tensor_parallel_resume(cfg, run_dir)
    if batch is not None and not problems:  # DeepSpeed's own classes, when the config holds more than trl_ds's keys
        problems += deepspeed_problems(cfg, batch, run_dir)
    if launching:
        problems += check_local_files(cfg) + check_machine(cfg, run_dir) + check_history(cfg, run_dir, batch)
        problems += check_trainer_here(cfg) + check_bitsandbytes_here(cfg)
    problems += check_data_files(cfg)  # every local data file here read through, in a dry run too
    if problems:
        raise ConfigError(problems)
    return batch


def rule_problems(cfg) -> List[str]:
    """Every rule of the config alone (no batch, run dir or machine): the planner checks its grid's rows with these."""
    return [problem for rule in RULES for problem in rule(cfg)]


def batch_problems(cfg) -> Tuple[Optional[Batch], List[str]]:
    """(the resolved batch or None, its problems)."""
    try:
        # Sequence-parallel ranks share their samples: only data-parallel ranks multiply the batch.
        batch = resolve_batch(chosen_micro_batch(cfg), data_parallel_world(cfg),
                              cfg.trainer.gradient_accumulation_steps, cfg.batch.global_size)
    except ConfigError as err:
        return None, err.problems
    return batch, check_generation_batch(cfg, batch) + check_kto_batch(cfg, batch) + check_elastic_batch(cfg, batch)


def chosen_micro_batch(cfg) -> int:
    """The micro-batch in force; `auto` is replaced by trl_ds.plan.autofit before validation, so one left is a bug."""
    micro = micro_batch(cfg)
    if micro is None:
        raise RuntimeError("trainer.per_device_train_batch_size=auto reached validation unresolved")
    return micro


def check_zero(cfg) -> List[str]:
    stage = cfg.zero.stage
    if stage not in (0, 1, 2, 3):
        return [f"zero.stage={stage} is not a ZeRO stage. Use zero=stage0, stage1, stage2 or stage3."]
    where = offloads(cfg)
    problems = zero_offload_problems(stage, where["optimizer"], where["param"])
    if stage == 3 and cfg.save_final_model and not cfg.zero.stage3_gather_16bit_weights_on_model_save:
        problems.append("save_final_model=true with zero=stage3 needs zero.stage3_gather_16bit_weights_on_model_save="
                        "true, or each rank saves only its partition. Set it to true, or save_final_model=false.")
    # DeepSpeed's bounds: reduce_bucket_size > 0, the rest >= 0; the allgather bucket divides ZeRO-1/2's all-gather
    # into shards, so 0 would divide by zero after the ranks start.
    problems += [f"zero.{k}={cfg.zero[k]} must be positive." for k in ("reduce_bucket_size", "allgather_bucket_size")
                 if cfg.zero[k] <= 0]
    at_least_0 = ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "sub_group_size",
                  "stage3_param_persistence_threshold")
    problems += [f"zero.{k}={cfg.zero[k]} must be 0 or more." for k in at_least_0 if cfg.zero[k] < 0]
    if cfg.zero.sub_group_size == 0 and cfg.offload.ratio < 1.0:
        problems.append(f"offload.ratio={cfg.offload.ratio:g} moves whole sub-groups to the device, and "
                        f"zero.sub_group_size=0 makes each parameter its own: set zero.sub_group_size=100000000.")
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


def check_launcher(cfg) -> List[str]:
    c, launcher = cfg.cluster, cfg.launcher
    problems = [f"launcher.rdzv_timeout={launcher.rdzv_timeout} must be at least 1 (seconds), e.g. "
                f"launcher.rdzv_timeout=900."] if launcher.rdzv_timeout < 1 else []
    if launcher.max_restarts < 0:
        problems.append(f"launcher.max_restarts={launcher.max_restarts} must be 0 or more.")
    for group, env in (("cluster", c.env), ("launcher", launcher.env)):
        problems += [f"{group}.env has {name!r}, which is not an environment variable name (letters, digits and _, "
                     f"not starting with a digit). Rename it, e.g. +{group}.env.NCCL_DEBUG=WARN."
                     for name in env if not ENV_NAME.match(name)]
    if not (HOST_NAME.match(c.master_addr) or IPV6.match(c.master_addr)):
        problems.append(f"cluster.master_addr={c.master_addr!r} is not a host name or address. Give node 0's "
                        f"name or address, e.g. cluster.master_addr=node-0 or cluster.master_addr=10.0.0.1.")
    return problems


def check_zeropp(cfg) -> List[str]:
    if not cfg.zero.zeropp:
        return []
    problems = [f"zero.zeropp=true needs zero=stage3 (got zero.stage={cfg.zero.stage}). Use zero=stage3 or "
                f"zero.zeropp=false."] if cfg.zero.stage != 3 else []
    if value(cfg.cluster.device) != "cuda":
        problems.append("zero.zeropp=true quantizes with CUDA kernels, and cluster.device=cpu here. Use a GPU "
                        "cluster such as cluster=2x8, or zero.zeropp=false.")
    return problems


def check_precision(cfg) -> List[str]:
    chosen = dtype(cfg)
    if value(cfg.cluster.device) == "cpu" and chosen != "fp32":
        return [f"precision={chosen} needs a GPU cluster (cluster.device=cpu here); trl_ds trains CPU runs in fp32. "
                f"Use precision=fp32 (or precision=auto) or a GPU cluster such as cluster=1x8."]
    return []


def check_trainer(cfg) -> List[str]:
    t = cfg.trainer
    problems = [f"trainer.{k}={t[k]} must be at least 1." for k in ("max_length", "logging_steps") if t[k] < 1]
    problems += steps_or_fraction("trainer.warmup_steps", t.warmup_steps, "a number of steps (0 or more)")
    if t.max_steps < 1 and t.max_steps != -1:
        problems.append(f"trainer.max_steps={t.max_steps} must be at least 1. Or set trainer.max_steps=-1 to train "
                        f"trainer.num_train_epochs={t.num_train_epochs} epochs.")
    elif t.max_steps == -1 and t.num_train_epochs <= 0:
        problems.append(f"trainer.num_train_epochs={t.num_train_epochs} must be positive with trainer.max_steps=-1.")
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
    elif path and is_local_path(path):
        problems += model_folder_problems(path)
    data = cfg.trainer.dataset_name
    if data != "tiny" and is_local_path(data) and not os.path.exists(os.path.expanduser(data)):
        problems.append(f"trainer.dataset_name={data} does not exist. Give an existing .jsonl/.json/.parquet file, "
                        f"a hub dataset name, or trainer.dataset_name=tiny.")
    return problems


WEIGHTS = re.compile(r"\.(safetensors|bin)$|\.safetensors\.index\.json$|\.bin\.index\.json$")
# The files transformers' AutoTokenizer builds a tokenizer from (fast tokenizer.json, sentencepiece, BPE, WordPiece,
# tiktoken); tokenizer_config.json alone names a class and no vocabulary.
TOKENIZER = re.compile(r"^(tokenizer\.json|tokenizer\.model|spiece\.model|vocab\.json|vocab\.txt|.*\.tiktoken|"
                       r"sentencepiece\.bpe\.model)$")


def model_folder_problems(path: str) -> List[str]:
    """A save_pretrained folder the ranks load from: without weights or a tokenizer, each rank fails after it starts."""
    names = os.listdir(os.path.expanduser(path))
    wanted = (("weights (model.safetensors or pytorch_model.bin)", WEIGHTS),
              ("tokenizer files (tokenizer.json, tokenizer.model, vocab.json, ...)", TOKENIZER))
    missing = [what for what, pattern in wanted if not any(pattern.search(n) for n in names)]
    if not missing:
        return []
    return [f"model.name_or_path={path} holds no {' and no '.join(missing)}: every rank would fail loading it. "
            f"Save the model with save_pretrained and its tokenizer with tokenizer.save_pretrained into that folder "
            f"(trl-ds plan reads config.json alone)."]


SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE)


def check_secrets(cfg) -> List[str]:
    """Values in these blocks are written into launch.sh / sbatch.sh: a secret there would sit in a file."""
    blocks = {"launcher.env": cfg.launcher.env, "cluster.env": cfg.cluster.get("env", {})}
    return [f"{where}.{name} looks like a secret, and trl_ds writes {where} into the run dir's scripts. Remove it "
            f"and export {name} in the environment of the launch instead (ranks inherit it; nothing is written)."
            for where, block in blocks.items() for name in (block or {}) if SECRET_NAME.search(name)]


def steps_or_fraction(key: str, given: Any, steps: str) -> List[str]:
    """transformers' save_steps and warmup_steps: a number of steps, or below 1 a fraction of the run's steps (as
    TRL recipes write them: save_steps: 0.5, warmup_steps: 0.1)."""
    number = isinstance(given, (int, float)) and not isinstance(given, bool)
    if number and given >= 0 and (given < 1 or float(given).is_integer()):
        return []
    return [f"{key}={given} must be {steps} or a fraction of the run's steps below 1 (e.g. 0.1)."]


def check_checkpoint(cfg) -> List[str]:
    c = cfg.checkpoint
    problems = steps_or_fraction("checkpoint.every_steps", c.every_steps, "0 (off), a number of steps")
    problems += [f"checkpoint.keep_last={c.keep_last} must be at least 1."] if c.keep_last < 1 else []
    if c.every_epoch and not problems and c.every_steps > 0:  # transformers saves by one strategy
        problems.append(f"checkpoint.every_epoch=true and checkpoint.every_steps={c.every_steps} both choose when to "
                        f"save; transformers saves by one. Set checkpoint.every_steps=0 or "
                        f"checkpoint.every_epoch=false.")
    if cfg.resume not in ("auto", "never"):
        problems.append(f"resume={cfg.resume} is not a choice. Use resume=auto (continue from the newest complete "
                        f"checkpoint in the run dir) or resume=never.")
    return problems


def check_machine(cfg, run_dir: str) -> List[str]:
    """What this machine must have for a real launch. GPUs only where every rank runs here; elsewhere each node's
    launch.sh counts its own, and SLURM's partition is compared when SLURM answers."""
    problems = launcher_of(cfg).partition_gpus(cfg)
    if value(cfg.cluster.device) == "cuda" and ranks_run_here(cfg):
        have = count_gpus()
        if have < cfg.cluster.gpus_per_node:
            problems.append(f"cluster={cfg.cluster.name} asks for {cfg.cluster.gpus_per_node} GPUs per node "
                            f"(cluster.gpus_per_node={cfg.cluster.gpus_per_node}) but this machine has {have}. "
                            f"Use dry_run=true to write the run dir only, cluster.gpus_per_node={have or 1}"
                            f"{'' if have else ' on a GPU machine'}, or cluster=local to train on CPU.")
    where = offloads(cfg)
    paths = ({nvme_path(cfg, run_dir): "offload.nvme_path"} if where["param"] == "nvme" else {})
    if where["optimizer"] == "nvme":  # its own folder where one is given (offload.optimizer_nvme_path)
        key = "offload.optimizer_nvme_path" if cfg.offload.get("optimizer_nvme_path") else "offload.nvme_path"
        paths.setdefault(optimizer_nvme_path(cfg, run_dir), key)
    for path, key in paths.items():
        problems += [p for p in check_nvme(path, key) if p not in problems]  # libaio's line once
    return problems


def check_nvme(path: str, key: str = "offload.nvme_path") -> List[str]:
    problems = []
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or "."
    if not os.path.isdir(existing) or not can_write(existing):
        problems.append(f"{key}={path} is not writable ({existing} is not a writable folder). "
                        f"Set {key} to a folder on a local NVMe drive that you can write.")
    if not (ctypes.util.find_library("aio") and os.path.exists(LIBAIO_HEADER)):
        problems.append("offload=nvme needs libaio for DeepSpeed's async_io op, and it is not installed here. "
                        "Install it with: apt-get install -y libaio-dev (or use offload=cpu).")
    return problems


def can_write(folder: str) -> bool:
    """Try it: permission bits say nothing to root, and /proc or a read-only mount refuse anyway."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".trl_ds_probe", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def count_gpus() -> int:
    """GPUs visible here, without importing torch (nvidia-smi answers in milliseconds)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:  # a wedged driver can stall nvidia-smi: after 10 s count none (the GPU-count line then says 0)
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


RULES: List[Callable] = [
    check_secrets, check_checkpoint, check_zero, check_offload, check_cluster, check_precision, check_trainer,
    check_model, check_launcher, check_zeropp, launcher_checks, check_slurm, check_trainer_options,
    check_peft, check_quantization, check_sequence_parallel, check_tensor_parallel, check_passthrough, check_eval,
    check_rendezvous, check_hardware_values,
    *DEEPSPEED_RULES,
    check_argument_values,  # values with a closed set of choices, against transformers' and TRL's lists
    check_script,
]
