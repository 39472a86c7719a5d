"""The per-rank worker: `python -m trl_ds.worker.train <run dir>`, started by torchrun or the deepspeed launcher.

It reads only the run dir (Hydra never runs here), trains with TRL + DeepSpeed, and writes metrics.jsonl (rank 0),
memory/rank_K.json (every rank) and summary.json (rank 0).
"""
import glob
import json
import os
import shutil
import sys
import time

from transformers import TrainerCallback

from trl_ds.config.topology import topology
from trl_ds.rundir.checkpoint import checkpoints, latest_complete, mark_complete, rotate, step_of
from trl_ds.rundir.disk_space import full_disk_line, is_disk_full
from trl_ds.rundir.layout import (
    CHECKPOINT_DIR,
    FINAL_MODEL_DIR,
    JOINED_FILE,
    MEMORY_DIR,
    METRICS,
    PROGRESS_DIR,
    SUMMARY,
    TINY_MODEL_DIR,
    load_run_config,
    memory_file,
    node_log_dir,
    write_json,
    write_text,
)
from trl_ds.rundir.lifeline import watch_launcher
from trl_ds.rundir.metrics import mean_loss, prepare_for_resume, read_rows
from trl_ds.rundir.resume import prepare_resume
from trl_ds.rundir.universal import shape_change
from trl_ds.short_lived import skip_final_collection
from trl_ds.worker.cores import share_cores
from trl_ds.worker.data import whole_global_batches
from trl_ds.worker.gpu_cap import apply_gpu_cap
from trl_ds.worker.measure import measure_rank, peak_memory
from trl_ds.worker.moe_leaf import leaf_module_names
from trl_ds.worker.trainers import count_parameters

PROBE_FILE = "probe_logits.pt"  # in final_model/: input ids and the engine's logits


class DiskFullError(OSError):
    """A write found the run dir's disk full or read-only; the message names the path, the free space, what was kept."""


def main(argv) -> int:
    run_dir = os.path.abspath([a for a in argv if not a.startswith("--local_rank")][0])
    try:
        return train(run_dir)
    except DiskFullError:  # already named by what was being written
        raise
    except Exception as err:
        if not is_disk_full(err):
            raise
        path = getattr(err, "filename", None) or newest_checkpoint(run_dir) or run_dir
        raise DiskFullError(full_disk_line(str(path), run_dir, err)) from None  # its cause is the one line


def newest_checkpoint(run_dir: str):
    found = checkpoints(os.path.join(run_dir, CHECKPOINT_DIR))
    return found[-1] if found else None


def train(run_dir: str) -> int:
    cfg = load_run_config(run_dir)
    state = init_distributed()
    apply_gpu_cap(cfg.cluster, state.local_process_index)  # cluster.gpu_memory_gb on a bigger GPU
    mark_joined(run_dir, state)
    if state.is_main_process:
        forget_other_ranks(run_dir, state.num_processes)
    if cfg.model.name_or_path is None:
        prepare_tiny_model(cfg, run_dir, state)
    resume_from, universal = choose_resume(cfg, run_dir, state) if cfg.resume == "auto" else (None, False)
    trainer = build_trainer(cfg, run_dir, load_universal=universal)
    trainer.train_dataset = whole_global_batches(trainer, state.num_processes)
    trainer.add_callback(MarkComplete(cfg.checkpoint.keep_last, state.num_processes, cfg.zero.stage))
    trainer.add_callback(LiveMemory(run_dir, state.process_index))
    started = time.time()
    result = trainer.train(resume_from_checkpoint=literal_path(resume_from, run_dir))
    wall = time.time() - started
    write_json(os.path.join(run_dir, memory_file(state.process_index)),
               measure_rank(trainer, state.process_index))  # after the last step, before saving gathers weights
    if cfg.save_final_model:
        save_final_model(trainer, run_dir, state)
    state.wait_for_everyone()
    swap = nvme_swap_folder(trainer.args.hf_deepspeed_config.config)
    if state.is_main_process:
        summary = summarize(run_dir, trainer, result.metrics, wall, state, resumed=resume_from is not None)
        if swap:
            summary["nvme_swap_bytes"] = folder_bytes(swap)
        write_json(os.path.join(run_dir, SUMMARY), summary)
    state.wait_for_everyone()
    if swap and not cfg.offload.keep_nvme_files and state.is_local_main_process:
        shutil.rmtree(swap, ignore_errors=True)
    return 0


def forget_other_ranks(run_dir: str, world_size: int) -> None:
    """An earlier launch with more ranks left memory and progress files of ranks this one does not have."""
    for folder in (MEMORY_DIR, PROGRESS_DIR):
        path = os.path.join(run_dir, folder)
        for name in os.listdir(path) if os.path.isdir(path) else []:
            rank = name[len("rank_"):-len(".json")]
            if name.startswith("rank_") and name.endswith(".json") and rank.isdigit() and int(rank) >= world_size:
                os.remove(os.path.join(path, name))


def literal_path(checkpoint, run_dir: str):
    """transformers finds DeepSpeed's shards with glob(f"{checkpoint}/global_step*"): a run dir named with [, * or ?
    is a pattern there. The rank then works from the run dir and names the checkpoint relative to it."""
    if checkpoint and glob.escape(run_dir) != run_dir:
        os.chdir(run_dir)
        return os.path.relpath(checkpoint, run_dir)
    return checkpoint


def save_final_model(trainer, run_dir: str, state) -> None:
    """final_model/ (ZeRO-3: gathered from every rank) and the probe logits; a full disk is named by this folder
    (the safetensors writer's error names no file)."""
    folder = os.path.join(run_dir, FINAL_MODEL_DIR)
    try:
        trainer.save_model(folder)
        save_probe_logits(trainer, os.path.join(folder, PROBE_FILE), state)
    except Exception as err:
        if is_disk_full(err):
            raise DiskFullError(full_disk_line(folder, run_dir, err)) from None
        raise


def nvme_swap_folder(ds_config: dict):
    """Where DeepSpeed swapped to NVMe (it writes under <nvme_path>/zero_stage_3), or None."""
    zero = ds_config.get("zero_optimization", {})
    for block in (zero.get("offload_param"), zero.get("offload_optimizer")):
        if block and block.get("device") == "nvme":
            return os.path.join(block["nvme_path"], "zero_stage_3")
    return None


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def choose_resume(cfg, run_dir: str, state):
    """(the checkpoint to resume from or None, whether to load it in DeepSpeed's universal format).

    Rank 0 readies it (trl_ds/rundir/resume.py); the other ranks wait, then read the same answer from the run dir.
    """
    output_dir = os.path.join(run_dir, CHECKPOINT_DIR)
    if state.is_main_process:
        for line in prepare_resume(output_dir, state.num_processes, cfg.zero.stage)[2]:
            print(line, flush=True)
    state.wait_for_everyone()
    chosen = latest_complete(output_dir)
    if chosen and 0 < cfg.trainer.max_steps < step_of(chosen):  # the launcher refuses this; launch.sh run by hand
        raise ValueError(f"trainer.max_steps={cfg.trainer.max_steps} is below the newest checkpoint {chosen}: "
                         f"resuming would train past it. Relaunch with trainer.max_steps={step_of(chosen)} or more.")
    return chosen, bool(chosen and shape_change(chosen, state.num_processes, cfg.zero.stage))


class MarkComplete(TrainerCallback):
    """After every rank has saved a checkpoint, rank 0 marks it complete (its files and sizes) and rotates old ones."""

    def __init__(self, keep_last: int, world_size: int, zero_stage: int):
        self.keep_last = keep_last
        self.world_size = world_size
        self.zero_stage = zero_stage

    def on_save(self, args, state, control, **kwargs):
        import torch.distributed as dist

        dist.barrier()  # every rank's shards are on disk before the marker says so
        if state.is_world_process_zero:
            checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            mark_complete(checkpoint, state.global_step, self.world_size, self.zero_stage)
            rotate(args.output_dir, self.keep_last)
        dist.barrier()


class LiveMemory(TrainerCallback):
    """Each rank's peak memory so far, in progress/rank_K.json, for the live display (launch/progress.py).
    At most every EVERY_S seconds: one small file write per rank."""

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


def save_probe_logits(trainer, path: str, state) -> None:
    """The trained engine's logits on a fixed batch, so a reload of the saved model can be checked against them.

    Every rank runs the forward (ZeRO-3 gathers parameters collectively); rank 0 writes the file.
    """
    import torch

    probe = torch.arange(16, dtype=torch.long).remainder(trainer.model.config.vocab_size).reshape(2, 8)
    model = trainer.model_wrapped
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=probe.to(trainer.args.device)).logits.float().cpu()
    if state.is_main_process:
        torch.save({"input_ids": probe, "logits": logits}, path)


def init_distributed():
    """Join the process group before any trainer config exists.

    On CPU, Accelerate sees no GPU backend and would give every rank world size 1; a PartialState built with gloo
    and `use_configured_state` in the trainer args makes the trainer use this state instead.
    """
    import torch
    from accelerate import PartialState

    adopt_launcher_ranks(os.environ)
    share_cores(os.environ, torch)
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    return PartialState(backend="nccl" if torch.cuda.is_available() else "gloo")


# Rank variables of launchers that start ranks themselves (mpirun of Open MPI, MPICH/Intel MPI, MVAPICH; srun), for
# torch.distributed's env:// names; torchrun and DeepSpeed's per-node launch set those names already.
LAUNCHER_RANKS = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                         "SLURM_NTASKS_PER_NODE"),
}


def adopt_launcher_ranks(env) -> None:
    """Without RANK (an MPI launcher or srun started this rank): take the ranks from its variables, and the node
    as rank // ranks per node (every node runs as many)."""
    if "RANK" in env:
        return
    for name, sources in LAUNCHER_RANKS.items():
        found = next((env[s] for s in sources if s in env), None)
        if found is not None:
            env[name] = found
    if "RANK" in env and "LOCAL_WORLD_SIZE" in env:
        env.setdefault("CROSS_RANK", str(int(env["RANK"]) // int(env["LOCAL_WORLD_SIZE"])))


def mark_joined(run_dir: str, state) -> None:
    """Tell this node's launcher that the process group formed, which ends its join deadline (launch/run.py)."""
    if state.is_local_main_process:
        # launch.sh's node rank; else torchrun's and deepspeed's (ranks started over ssh get no launch.sh)
        env = os.environ
        node = int(env.get("TRL_DS_NODE_RANK") or env.get("GROUP_RANK") or env.get("CROSS_RANK") or 0)
        write_text(os.path.join(node_log_dir(run_dir, node), JOINED_FILE), f"{state.num_processes} ranks\n")


def prepare_tiny_model(cfg, run_dir: str, state) -> None:
    from trl_ds.worker.models import save_tiny_model

    if state.is_local_main_process:
        save_tiny_model(cfg.model, os.path.join(run_dir, TINY_MODEL_DIR), cfg.seed)
    state.wait_for_everyone()


def build_trainer(cfg, run_dir: str, load_universal: bool = False):
    """The trainer named by cfg.trainer.name (trl_ds/worker/trainers.py), logging to metrics.jsonl."""
    from trl_ds.worker.trainers import build_trainer as build_named_trainer

    logger = MetricsLogger(os.path.join(run_dir, METRICS), topology(cfg).shares_samples)  # sp × tp ranks
    return build_named_trainer(cfg, run_dir, callbacks=[logger], load_universal=load_universal)


class MetricsLogger(TrainerCallback):
    """Appends each logging step's metrics and throughput to metrics.jsonl on rank 0."""

    def __init__(self, path: str, sequence_parallel: int = 1):
        self.path = path
        self.sequence_parallel = sequence_parallel  # ranks that share each sample
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
            * args.gradient_accumulation_steps // self.sequence_parallel
        record = {"step": state.global_step, "time": round(now, 3), **logs,
                  "samples_per_second": round(samples / max(now - self.last[0], 1e-9), 3)}
        self.last = (now, state.global_step)
        self._write(record)

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


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
    }



def _sequence_parallel(trainer) -> int:
    """Ranks that share each sample (Ulysses): they do not multiply the batch."""
    pc = trainer.accelerator.parallelism_config
    return pc.sp_size if pc is not None else 1


if __name__ == "__main__":
    watch_launcher()  # never outlive the launch: a SIGKILLed launcher ends its ranks within a second
    skip_final_collection()
    sys.exit(main(sys.argv[1:]))
