"""TRL trainer arguments, from the same resolved numbers as the DeepSpeed JSON: what `trainer.yaml` holds, in TRL's
own names, loadable by `trl <trainer> --config trainer.yaml` and parsed by the worker with the same TRL parser.
"""
import os
import re
from typing import Any, Dict, List, Tuple

from trl_ds.config.batch import Batch
from trl_ds.config.quantization import model_config_fields
from trl_ds.config.values import dtype, sp_size, value
from trl_ds.rundir.layout import ACCELERATE_YAML, CHECKPOINT_DIR, DS_CONFIG, TINY_DATA_DIR, TINY_MODEL_DIR

# Fields of the trainer group that every TRL trainer takes, passed through unchanged.
PASSTHROUGH = ("max_steps", "per_device_train_batch_size", "learning_rate", "weight_decay", "adam_beta1",
               "adam_beta2", "adam_epsilon", "max_grad_norm", "lr_scheduler_type", "warmup_steps", "logging_steps",
               "dataloader_num_workers", "dataloader_drop_last", "report_to", "num_train_epochs", "eval_strategy",
               "eval_steps", "per_device_eval_batch_size", "dataset_test_split")
# Fields only some trainers take (their TRL config classes have no such argument otherwise).
TRAINER_ONLY: Dict[str, Tuple[str, ...]] = {
    "max_length": ("sft", "dpo", "reward", "kto"), "beta": ("dpo", "grpo", "kto", "rloo"),
    **dict.fromkeys(("num_generations", "max_completion_length", "temperature", "reward_funcs"), ("grpo", "rloo"))}

# trainer.yaml keys that may name a place inside the run dir; there they are written "./..." (relative to the run dir,
# never a hub name), so a copied run dir points at its own files.
RUN_DIR_PATHS = ("model_name_or_path", "dataset_name", "output_dir", "deepspeed", "accelerate_config")
HERE = "./"


def is_run_dir_path(path: Any) -> bool:
    return isinstance(path, str) and path.startswith(HERE)


def relative_to_run_dir(path: Any, run_dir: str) -> Any:
    """A path inside run_dir as "./rel"; anything else as it is."""
    if isinstance(path, str) and path.startswith(run_dir.rstrip("/") + "/"):
        return HERE + os.path.relpath(path, run_dir)
    return path


def run_dir_relative_args(args: Dict[str, Any], run_dir: str) -> Dict[str, Any]:
    return {k: relative_to_run_dir(v, run_dir) if k in RUN_DIR_PATHS else v for k, v in args.items()}


def nvme_blocks(ds_config: Dict[str, Any]):
    """The offload blocks of a DeepSpeed dict that name an NVMe path."""
    zero = ds_config.get("zero_optimization", {})
    return [b for b in (zero.get("offload_param"), zero.get("offload_optimizer")) if b and "nvme_path" in b]


def in_run_dir(ds_config: Dict[str, Any], run_dir: str) -> Dict[str, Any]:
    """ds_config.json with its "./" NVMe paths made absolute for a rank that runs outside the run dir."""
    for block in nvme_blocks(ds_config):
        if is_run_dir_path(block["nvme_path"]):
            block["nvme_path"] = os.path.join(run_dir, block["nvme_path"])
    return ds_config


def model_path(cfg, run_dir: str) -> str:
    return cfg.model.name_or_path or os.path.join(run_dir, TINY_MODEL_DIR)


def dataset_path(cfg, run_dir: str) -> str:
    name = cfg.trainer.dataset_name
    return os.path.join(run_dir, TINY_DATA_DIR) if name == "tiny" else name


def eval_dataset_path(cfg, run_dir: str) -> str:
    """The evaluation data: trainer.eval_dataset_name, or the training dataset (its dataset_test_split)."""
    name = cfg.trainer.eval_dataset_name or cfg.trainer.dataset_name
    return os.path.join(run_dir, TINY_DATA_DIR) if name == "tiny" else name


def trainer_keys(name: str) -> Tuple[str, ...]:
    return PASSTHROUGH + tuple(k for k, owners in TRAINER_ONLY.items() if name in owners)


def build_trainer_args(cfg, batch: Batch, run_dir: str) -> Dict[str, Any]:
    t = cfg.trainer
    precision = dtype(cfg)
    args: Dict[str, Any] = {
        # ScriptArguments / ModelConfig of `trl <cmd> --config`
        "model_name_or_path": model_path(cfg, run_dir), "dataset_name": dataset_path(cfg, run_dir),
        "dataset_train_split": t.dataset_train_split,
        # training arguments
        "output_dir": os.path.join(run_dir, CHECKPOINT_DIR), "seed": cfg.seed,
        "gradient_accumulation_steps": batch.accumulation, "bf16": precision == "bf16", "fp16": precision == "fp16",
        **checkpoint_args(cfg), "deepspeed": os.path.join(run_dir, DS_CONFIG)}
    if value(cfg.cluster.device) == "cpu":
        # With `deepspeed` set and no GPU, transformers builds accelerate's state with no backend, and accelerate then
        # counts one process per rank (batch mismatch under `trl <cmd>`); use_cpu makes it join with gloo, and the
        # Trainer still engages DeepSpeed. The worker passes its own configured state either way.
        args["use_cpu"] = True
    name = value(t.name)
    args.update({k: _plain(value(t[k])) for k in trainer_keys(name)})
    args.update(passthrough_args(cfg))
    # transformers 5 renamed gradient_checkpointing (a deprecated alias now); the group keeps the familiar name.
    args["activation_checkpointing"] = t.gradient_checkpointing
    args.update(peft_args(cfg))
    args.update(sequence_parallel_args(cfg))
    # Not a TRL argument: `trl <cmd>` hands it to `accelerate launch --config_file`.
    args["accelerate_config"] = os.path.join(run_dir, ACCELERATE_YAML)
    return args


def passthrough_args(cfg) -> Dict[str, Any]:
    """trainer.args: TRL's own names, checked before launch (trl_ds/check/trl_arguments.py), as plain YAML values."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.trainer.args) if cfg.trainer.args else {}


def lora_target_modules(targets) -> List[str]:
    """TRL's ModelConfig turns a one-item list into its item (model_config.py __post_init__), and PEFT reads a string
    as a regular expression matched against each module's full name: ["query_key_value"] would match none of BLOOM's
    transformer.h.0.self_attention.query_key_value. One target is written as the expression PEFT's list form means
    (the name, or a name ending in ".name"); two or more stay a list."""
    targets = list(targets)
    if len(targets) == 1 and targets[0] != "all-linear":
        return [rf"(.*\.)?{re.escape(targets[0])}"]
    return targets


def peft_args(cfg) -> Dict[str, Any]:
    """TRL's ModelConfig names, which `trl <cmd>` turns into a LoraConfig (and BitsAndBytesConfig)."""
    p = cfg.peft
    if value(p.name) == "none":
        return {}
    args = {"use_peft": True, "lora_r": p.r, "lora_alpha": p.lora_alpha, "lora_dropout": p.lora_dropout,
            "lora_target_modules": lora_target_modules(p.target_modules), **model_config_fields(cfg)}
    if value(cfg.trainer.name) == "reward":
        # The reward model's score head is new: it trains in full beside the adapters.
        args.update(lora_task_type="SEQ_CLS", lora_modules_to_save=["score"])
    return args


def sequence_parallel_args(cfg) -> Dict[str, Any]:
    """Ulysses shards each sequence across sp.size ranks: lengths must divide, attention must take position_ids. On
    CPU every batch is padded to max_length: gloo (unlike NCCL) gathers each sp group's batches in equal shapes only."""
    size = sp_size(cfg)
    if size == 1:
        return {}
    multiple = cfg.trainer.max_length if value(cfg.cluster.device) == "cpu" else size
    return {"pad_to_multiple_of": multiple, "attn_implementation": cfg.sp.attn_implementation}


def _plain(x: Any) -> Any:
    """YAML wants plain lists, not OmegaConf's."""
    return list(x) if hasattr(x, "__iter__") and not isinstance(x, str) else x


def checkpoint_args(cfg) -> Dict[str, Any]:
    """transformers saves; trl_ds marks complete and rotates (theirs could delete the last complete one)."""
    every = cfg.checkpoint.every_steps
    if cfg.checkpoint.every_epoch:
        return {"save_strategy": "epoch", "save_total_limit": None}
    if every <= 0:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": every, "save_total_limit": None}
