"""The per-rank worker: `python -m trl_ds.worker.train <run dir>`, started by torchrun or the deepspeed launcher.

It reads only the run dir (Hydra never runs here), trains with TRL + DeepSpeed, and records through the same
callbacks as a user's script (worker/records.py)."""
# ruff: noqa: E402  (the rank keeps out unused packages before transformers is imported)
import glob
import os
import sys
from contextlib import contextmanager

from trl_ds.worker.unused_packages import keep_out_unused_packages

if __name__ == "__main__":
    keep_out_unused_packages(next(a for a in sys.argv[1:] if not a.startswith("--local_rank")))


from trl_ds.rundir.checkpoint import checkpoints, latest_complete, step_of
from trl_ds.rundir.disk_space import full_disk_line, is_disk_full
from trl_ds.rundir.layout import CHECKPOINT_DIR, FINAL_MODEL_DIR, load_run_config
from trl_ds.rundir.lifeline import watch_launcher
from trl_ds.rundir.resume import prepare_resume
from trl_ds.rundir.universal import shape_change, sub_groups
from trl_ds.short_lived import skip_final_collection
from trl_ds.worker.bootstrap import start_rank
from trl_ds.worker.data import whole_global_batches
from trl_ds.worker.own_steps import OwnAdamSteps
from trl_ds.worker.records import recording_callbacks, remove_nvme_swap

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
    state = start_rank(run_dir, cfg)
    resume_from, universal = choose_resume(cfg, os.path.join(run_dir, CHECKPOINT_DIR), state) \
        if cfg.resume == "auto" else (None, False)
    trainer = build_trainer(cfg, run_dir, load_universal=universal)
    trainer.train_dataset = whole_global_batches(trainer, state.num_processes)
    for callback in recording_callbacks(cfg, run_dir, state, trainer):
        trainer.add_callback(callback)
    if universal and cfg.zero.stage == 3:  # DeepSpeed's stage-3 universal load shares one step among sub-groups
        trainer.add_callback(OwnAdamSteps())
    # train() ends by writing memory/rank_K.json and summary.json (records.EndOfTrain), before saving gathers weights
    trainer.train(resume_from_checkpoint=literal_path(resume_from, run_dir))
    if cfg.save_final_model:
        save_final_model(trainer, run_dir, state)
    state.wait_for_everyone()
    remove_nvme_swap(cfg, trainer, state)
    return 0


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


def choose_resume(cfg, output_dir: str, state):
    """(the checkpoint in output_dir to resume from or None, whether to load it in DeepSpeed's universal format).
    Rank 0 readies it (trl_ds/rundir/resume.py); the other ranks wait, then read the same answer from the folder."""
    if state.is_main_process:
        for line in prepare_resume(output_dir, state.num_processes, cfg.zero.stage, sub_groups(cfg))[2]:
            print(line, flush=True)
    state.wait_for_everyone()
    chosen = latest_complete(output_dir)
    if chosen and 0 < cfg.trainer.max_steps < step_of(chosen):  # the launcher refuses this; launch.sh run by hand
        raise ValueError(f"trainer.max_steps={cfg.trainer.max_steps} is below the newest checkpoint {chosen}: "
                         f"resuming would train past it. Relaunch with trainer.max_steps={step_of(chosen)} or more.")
    return chosen, bool(chosen and shape_change(chosen, state.num_processes, cfg.zero.stage, sub_groups(cfg)))


def save_probe_logits(trainer, path: str, state) -> None:
    """The trained engine's logits on a fixed batch, so a reload of the saved model can be checked against them.
    Every rank runs the forward (ZeRO-3 gathers parameters collectively); rank 0 writes the file."""
    import torch

    probe = torch.arange(16, dtype=torch.long).remainder(trainer.model.config.vocab_size).reshape(2, 8)
    model = trainer.model_wrapped
    model.eval()
    with torch.no_grad(), unpacked_4bit(model):
        logits = model(input_ids=probe.to(trainer.args.device)).logits.float().cpu()
    if state.is_main_process:
        torch.save({"input_ids": probe, "logits": logits}, path)


@contextmanager
def unpacked_4bit(model):
    """bitsandbytes' 4-bit Linear in eval mode on CPU repacks its weight for a kernel that needs in_features in blocks
    of 64 and out_features of 32 (the tiny model's down_proj, 352 -> 128, is not). Marked training for the probe (the
    flag only chooses that path), its weight is used as trained, at any width."""
    four_bit = [m for m in model.modules() if type(m).__name__ == "Linear4bit"
                and type(m).__module__.startswith("bitsandbytes")]
    for module in four_bit:
        module.training = True
    try:
        yield
    finally:
        for module in four_bit:
            module.training = False


def build_trainer(cfg, run_dir: str, load_universal: bool = False):
    """The trainer named by cfg.trainer.name (trl_ds/worker/trainers.py); train() adds the recording callbacks."""
    from trl_ds.worker.trainers import build_trainer as build_named_trainer

    return build_named_trainer(cfg, run_dir, callbacks=[], load_universal=load_universal)


if __name__ == "__main__":
    watch_launcher()  # never outlive the launch: a SIGKILLed launcher ends its ranks within a second
    skip_final_collection()
    sys.exit(main(sys.argv[1:]))
