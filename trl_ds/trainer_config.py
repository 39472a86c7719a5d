"""TRL trainer arguments, from the same resolved numbers as the DeepSpeed JSON.

The dict is what `trainer.yaml` holds: TRL's own names, loadable by `trl sft --config trainer.yaml`.
"""
import os
from typing import Any, Dict

from .batch import Batch
from .values import dtype

# Fields of the trainer group that are TRL/transformers training arguments, passed through unchanged.
PASSTHROUGH = ("max_steps", "per_device_train_batch_size", "learning_rate", "weight_decay", "adam_beta1",
               "adam_beta2", "adam_epsilon", "max_grad_norm", "lr_scheduler_type", "warmup_steps", "logging_steps",
               "max_length", "gradient_checkpointing", "dataloader_num_workers", "report_to")

TINY_MODEL_DIR = "model"  # the tiny model is built and saved here by the first rank
TINY_DATA_DIR = "data"  # the built-in dataset is written here at build time
TRAINER_YAML = "trainer.yaml"
FINAL_MODEL_DIR = "final_model"  # the trained weights, loadable with from_pretrained


def model_path(cfg, run_dir: str) -> str:
    return cfg.model.name_or_path or os.path.join(run_dir, TINY_MODEL_DIR)


def dataset_path(cfg, run_dir: str) -> str:
    name = cfg.trainer.dataset_name
    return os.path.join(run_dir, TINY_DATA_DIR) if name == "tiny" else name


def build_trainer_args(cfg, batch: Batch, run_dir: str) -> Dict[str, Any]:
    t = cfg.trainer
    precision = dtype(cfg)
    args: Dict[str, Any] = {
        # ScriptArguments / ModelConfig of `trl <cmd> --config`
        "model_name_or_path": model_path(cfg, run_dir),
        "dataset_name": dataset_path(cfg, run_dir),
        "dataset_train_split": t.dataset_train_split,
        # training arguments
        "output_dir": os.path.join(run_dir, "trainer"),
        "seed": cfg.seed,
        "gradient_accumulation_steps": batch.accumulation,
        "bf16": precision == "bf16",
        "fp16": precision == "fp16",
        "save_strategy": "no",
        "deepspeed": os.path.join(run_dir, "ds_config.json"),
    }
    args.update({k: t[k] for k in PASSTHROUGH})
    return args
