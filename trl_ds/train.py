"""The per-rank worker: `python -m trl_ds.train <run dir>`, started by torchrun or the deepspeed launcher.

It reads only the run dir (Hydra never runs here), trains with TRL + DeepSpeed, and writes metrics.jsonl (rank 0),
memory/rank_K.json (every rank) and summary.json (rank 0).
"""
import json
import os
import sys
import time

import yaml
from transformers import TrainerCallback

from .memory.measure import measure_rank
from .rundir import load_run_config, read_json, write_json
from .trainer_config import FINAL_MODEL_DIR, TINY_MODEL_DIR, TRAINER_YAML


def main(argv) -> int:
    run_dir = os.path.abspath([a for a in argv if not a.startswith("--local_rank")][0])
    cfg = load_run_config(run_dir)
    state = init_distributed()
    if cfg.model.name_or_path is None:
        prepare_tiny_model(cfg, run_dir, state)
    trainer = build_trainer(cfg, run_dir)
    started = time.time()
    result = trainer.train()
    wall = time.time() - started
    write_json(os.path.join(run_dir, "memory", f"rank_{state.process_index}.json"),
               measure_rank(trainer, state.process_index))  # after the last step, before saving gathers weights
    if cfg.save_final_model:
        trainer.save_model(os.path.join(run_dir, FINAL_MODEL_DIR))  # ZeRO-3: gathered from every rank
    if state.is_main_process:
        write_json(os.path.join(run_dir, "summary.json"), summarize(run_dir, trainer, result.metrics, wall, state))
    state.wait_for_everyone()
    return 0


def init_distributed():
    """Join the process group before any trainer config exists.

    On CPU, Accelerate sees no GPU backend and would give every rank world size 1; a PartialState built with gloo
    and `use_configured_state` in the trainer args makes the trainer use this state instead.
    """
    import torch
    from accelerate import PartialState

    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    return PartialState(backend="nccl" if torch.cuda.is_available() else "gloo")


def prepare_tiny_model(cfg, run_dir: str, state) -> None:
    from .models import save_tiny_model

    if state.is_local_main_process:
        save_tiny_model(cfg.model, os.path.join(run_dir, TINY_MODEL_DIR), cfg.seed)
    state.wait_for_everyone()


def build_trainer(cfg, run_dir: str):
    """Trainer args (with the DeepSpeed config) exist before the model, so ZeRO-3 loads it partitioned."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    from .data import load_train_dataset

    with open(os.path.join(run_dir, TRAINER_YAML)) as f:
        args = yaml.safe_load(f)
    script_keys = ("model_name_or_path", "dataset_name", "dataset_train_split")
    model_path, dataset_name, split = (args.pop(k) for k in script_keys)
    args["deepspeed"] = read_json(os.path.join(run_dir, "ds_config.json"))
    training_args = SFTConfig(**args, accelerator_config={"use_configured_state": True})
    set_seed(cfg.seed)
    dtype = torch.bfloat16 if args["bf16"] else torch.float16 if args["fp16"] else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    dataset = load_train_dataset(dataset_name, split)
    return SFTTrainer(model=model, args=training_args, train_dataset=dataset, processing_class=tokenizer,
                      callbacks=[MetricsLogger(os.path.join(run_dir, "metrics.jsonl"))])


class MetricsLogger(TrainerCallback):
    """Appends each logging step's metrics and throughput to metrics.jsonl on rank 0."""

    def __init__(self, path: str):
        self.path = path
        self.last = None  # (time, step) of the previous log

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = (time.time(), state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        now = time.time()
        samples = (state.global_step - self.last[1]) * args.per_device_train_batch_size * args.world_size \
            * args.gradient_accumulation_steps
        record = {"step": state.global_step, "time": round(now, 3), **logs,
                  "samples_per_second": round(samples / max(now - self.last[0], 1e-9), 3)}
        self.last = (now, state.global_step)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def summarize(run_dir: str, trainer, metrics: dict, wall: float, state) -> dict:
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {
        "status": "completed",
        "final_loss": losses[-1] if losses else None,
        "mean_loss": metrics.get("train_loss"),
        "steps": trainer.state.global_step,
        "samples_per_second": metrics.get("train_samples_per_second"),
        "train_seconds": round(wall, 3),
        "world_size": state.num_processes,
        "global_batch": trainer.args.per_device_train_batch_size * state.num_processes
        * trainer.args.gradient_accumulation_steps,
        "distributed_type": str(state.distributed_type.value if hasattr(state.distributed_type, "value")
                                else state.distributed_type),
        "device": str(state.device),
        "run_dir": run_dir,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
