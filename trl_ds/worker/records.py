"""The one recorder of every trainer of a run, trl_ds's worker's and a user's script's (recording_callbacks):
metrics.jsonl rows (rank 0), checkpoint markers, each rank's live peak memory (progress/rank_K.json), token counts,
and at the end of each train() memory/rank_K.json (every rank) and summary.json (rank 0): EndOfTrain."""
import json
import os
import shutil
import time
from typing import Callable, Optional

from transformers import TrainerCallback

from trl_ds.config.topology import topology
from trl_ds.rundir.checkpoint import mark_complete, rotate
from trl_ds.rundir.layout import MEMORY_DIR, METRICS, PROGRESS_DIR, SUMMARY, write_json
from trl_ds.rundir.lifeline import LAUNCH_ID
from trl_ds.rundir.metrics import mean_loss, prepare_for_resume, read_rows
from trl_ds.rundir.universal import sub_groups
from trl_ds.worker.engine_check import write_rank_memory
from trl_ds.worker.measure import peak_memory
from trl_ds.worker.moe_leaf import leaf_module_names
from trl_ds.worker.trainers import count_parameters


def forget_other_ranks(run_dir: str, world_size: int) -> None:
    """An earlier launch with more ranks left memory and progress files of ranks this one does not have."""
    for folder in (MEMORY_DIR, PROGRESS_DIR):
        path = os.path.join(run_dir, folder)
        for name in os.listdir(path) if os.path.isdir(path) else []:
            rank = name[len("rank_"):-len(".json")]
            if name.startswith("rank_") and name.endswith(".json") and rank.isdigit() and int(rank) >= world_size:
                os.remove(os.path.join(path, name))



class LiveMemory(TrainerCallback):
    """Each rank's peak memory so far, in progress/rank_K.json, for the live display, at most every EVERY_S seconds."""

    EVERY_S = 2.0

    def __init__(self, run_dir: str, rank: int):
        self.path = os.path.join(run_dir, PROGRESS_DIR, f"rank_{rank}.json")
        self.rank = rank
        self.written = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        now = time.time()
        if now - self.written < self.EVERY_S and state.global_step > 1:
            return
        self.written = now
        write_json(self.path, peak_memory(self.rank))



class MetricsLogger(TrainerCallback):
    """Appends each logging step's metrics and throughput to metrics.jsonl on rank 0."""

    def __init__(self, path: str, shares_samples: int = 1):
        self.path = path
        self.shares_samples = shares_samples  # ranks that share each sample: sp × tp
        self.last = None  # (time, step) of the previous log

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = (time.time(), state.global_step)
        if state.is_world_process_zero:  # before the first append: a killed launch may have cut the last row
            cut, marked = prepare_for_resume(self.path, state.global_step)
            if cut or marked:
                print(f"trl_ds: {self.path}: removed {cut} cut line(s) a killed launch left; marked the {marked} "
                      f"row(s) after step {state.global_step} superseded (those steps are trained again)", flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        now = time.time()
        if any(k.startswith("eval_") for k in logs):  # an evaluation: its own row, no training throughput
            self._write({"step": state.global_step, "time": round(now, 3), **logs})
            return
        samples = (state.global_step - self.last[1]) * args.per_device_train_batch_size * args.world_size \
            * args.gradient_accumulation_steps // self.shares_samples
        record = {"step": state.global_step, "time": round(now, 3), **logs,
                  "samples_per_second": round(samples / max(now - self.last[0], 1e-9), 3)}
        self.last = (now, state.global_step)
        self._write(record)

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")



class TokenCount(TrainerCallback):
    """TRL's num_tokens (SFT, DPO, KTO), right under AutoTP (TRL divides by accelerate's tp size, which AutoTP leaves
    at 1; get_tp_size() reads the DeepSpeed config) and continued across a resume (TRL restarts it at 0: it is kept
    in the checkpoint's num_input_tokens_seen, or, where transformers fills that itself, taken from the last logged
    count)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.keeps = trainer.args.include_num_input_tokens_seen == "no"

    def on_train_begin(self, args, state, control, **kwargs):
        if hasattr(self.trainer, "_tp_size"):
            self.trainer._tp_size = self.trainer.get_tp_size()
        if hasattr(self.trainer, "_total_train_tokens"):
            self.trainer._total_train_tokens = state.num_input_tokens_seen if self.keeps else \
                int(logged_tokens(state.log_history, state.global_step) or 0)

    def on_step_end(self, args, state, control, **kwargs):
        if self.keeps and hasattr(self.trainer, "_total_train_tokens"):  # before this step's checkpoint is saved
            state.num_input_tokens_seen = self.trainer._total_train_tokens


def logged_tokens(log_history, step: int):
    """The newest training row's num_tokens at or before `step`, or None."""
    counts = [e["num_tokens"] for e in log_history if "num_tokens" in e and "loss" in e and e["step"] <= step]
    return counts[-1] if counts else None


def summarize(run_dir: str, trainer, metrics: dict, wall: float, state, resumed: bool = False) -> dict:
    """resumed: the mean loss is the whole run's (metrics.jsonl, every launch), not only this launch's steps."""
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    run_mean = mean_loss(read_rows(os.path.join(run_dir, METRICS))) if resumed else None
    evals = [(e["step"], e["eval_loss"]) for e in trainer.state.log_history if "eval_loss" in e]
    return {
        "status": "completed",
        "final_loss": losses[-1] if losses else None,
        "mean_loss": run_mean if run_mean is not None else metrics.get("train_loss"),
        "eval_loss": evals[-1][1] if evals else None,  # the last evaluation's, at step eval_step
        "eval_step": evals[-1][0] if evals else None,
        "evaluations": len(evals),
        "steps": trainer.state.global_step,
        "logging_steps": trainer.args.logging_steps,  # why no loss was logged, when none was
        "num_tokens": logged_tokens(trainer.state.log_history, trainer.state.global_step),  # the run's, all launches
        "samples_per_second": metrics.get("train_samples_per_second"),
        "train_seconds": round(wall, 3),
        "world_size": state.num_processes,
        "global_batch": trainer.args.per_device_train_batch_size * state.num_processes
        * trainer.args.gradient_accumulation_steps // (_sequence_parallel(trainer) * trainer.get_tp_size()),
        **count_parameters(trainer.model),
        "zero3_leaf_modules": leaf_module_names(trainer.model),  # MoE blocks gathered whole (worker/moe_leaf.py)
        "sequence_parallel_size": _sequence_parallel(trainer),
        "tensor_parallel_size": trainer.get_tp_size(),  # ranks splitting each layer (AutoTP)
        "gradient_checkpointing": bool(getattr(trainer.model, "is_activation_checkpointing", False)),
        "distributed_type": str(state.distributed_type.value if hasattr(state.distributed_type, "value")
                                else state.distributed_type),
        "device": str(state.device),
        "run_dir": run_dir,
        "launch_id": os.environ.get(LAUNCH_ID),  # the launch it belongs to (rundir/layout.py summary_is_latest)
    }



def _sequence_parallel(trainer) -> int:
    """Ranks that share each sample (Ulysses): they do not multiply the batch."""
    pc = trainer.accelerator.parallelism_config
    return pc.sp_size if pc is not None else 1


class MarkComplete(TrainerCallback):
    """After every rank has saved a checkpoint, rank 0 marks it complete (its files and sizes) and rotates old ones."""

    def __init__(self, keep_last: int, world_size: int, zero_stage: int, sub_group_size: Optional[int]):
        self.keep_last = keep_last
        self.shape = (world_size, zero_stage, sub_group_size)

    def on_save(self, args, state, control, **kwargs):
        import torch.distributed as dist

        dist.barrier()  # every rank's shards are on disk before the marker says so
        if state.is_world_process_zero:
            checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            mark_complete(checkpoint, state.global_step, *self.shape)
            rotate(args.output_dir, self.keep_last)
        dist.barrier()


class EndOfTrain(TrainerCallback):
    """The one writer of the end-of-train files, when train() ends (before the caller saves the model, which under
    ZeRO-3 gathers weights): memory/rank_K.json on every rank, with the engine comparison, then summary.json on rank
    0. ended(): what the caller adds to the summary (a script's name and trainer count), asked on every rank."""

    def __init__(self, cfg, run_dir: str, state, trainer, ended: Callable[[], dict] = dict):
        self.cfg, self.run_dir, self.state, self.trainer, self.ended = cfg, run_dir, state, trainer, ended
        self.started, self.resumed = None, False

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.time()  # after the engine is built and a checkpoint loaded
        self.resumed = state.global_step > 0  # a resumed run's state comes from its checkpoint

    def on_train_end(self, args, state, control, **kwargs):
        wall = time.time() - self.started
        extra = self.ended()
        found = write_rank_memory(self.trainer, self.cfg, self.run_dir, self.state.process_index)
        if not self.state.is_main_process:
            return
        summary = summarize(self.run_dir, self.trainer, train_metrics(state.log_history), wall, self.state,
                            resumed=self.resumed)
        ds = getattr(args, "hf_deepspeed_config", None)
        swap = nvme_swap_folder(ds.config) if ds else None
        if swap:
            summary["nvme_swap_bytes"] = folder_bytes(swap)
        write_json(os.path.join(self.run_dir, SUMMARY), {**summary, **extra, "engine_differences": found})


def train_metrics(log_history) -> dict:
    """The metrics train() returns (train_loss, train_samples_per_second, ...): transformers logs them, into
    log_history, just before on_train_end."""
    return next((e for e in reversed(log_history) if "train_runtime" in e), {})


def nvme_swap_folder(ds_config: dict):
    """Where DeepSpeed swapped to NVMe (it writes under <nvme_path>/zero_stage_3), or None."""
    zero = ds_config.get("zero_optimization", {})
    for block in (zero.get("offload_param"), zero.get("offload_optimizer")):
        if block and block.get("device") == "nvme":
            return os.path.join(block["nvme_path"], "zero_stage_3")
    return None


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def remove_nvme_swap(cfg, trainer, state) -> None:
    """Once every rank is done with it: the NVMe swap folder, unless offload.keep_nvme_files asks to keep it."""
    ds = getattr(trainer.args, "hf_deepspeed_config", None)
    swap = nvme_swap_folder(ds.config) if ds else None
    if swap and not cfg.offload.keep_nvme_files and state.is_local_main_process:
        shutil.rmtree(swap, ignore_errors=True)


def recording_callbacks(cfg, run_dir: str, state, trainer, ended: Callable[[], dict] = dict) -> list:
    """The callbacks of every trainer of a run (the worker's, and each one a user's script builds): the module's
    recorders, in order (ended: the caller's additions to the summary)."""
    return [MetricsLogger(os.path.join(run_dir, METRICS), topology(cfg).shares_samples),
            MarkComplete(cfg.checkpoint.keep_last, state.num_processes, cfg.zero.stage, sub_groups(cfg)),
            LiveMemory(run_dir, state.process_index), TokenCount(trainer),
            EndOfTrain(cfg, run_dir, state, trainer, ended)]
