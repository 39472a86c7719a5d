"""`python -m trl_ds.worker.fit <run dir> --start M [--limit L] [--steps S]`: the largest micro-batch that trains.

One rank, one process, one engine: the run dir's TRL trainer and DeepSpeed engine are built once, then each
micro-batch is tried for S real training steps. An out-of-memory error is caught and its memory released before
the next size. The search starts at the planner's answer M, doubles until a size runs out of memory (or reaches L),
then bisects; the largest that trained is tried once more last, so its peak is measured after every other size.
fit.json is rewritten after every trial, so a process that ends mid-search is started again on the same run dir
and continues (trl_ds/cli/fit.py).
"""
import argparse
import gc
import math
import os
import sys
import time
from typing import Dict, List, Optional

from trl_ds.rundir.layout import load_run_config, read_json, write_json

FIT_FILE = "fit.json"  # in the run dir: every trial so far and, at the end, the answer
ENGINE_BROKEN = 3  # exit code: a trial failed with something other than running out of memory


def next_micro(trials: Dict[int, bool], start: int, limit: int) -> Optional[int]:
    """The next micro-batch to try, or None when the boundary is known. trials: micro-batch -> trained. Pure."""
    if start not in trials:
        return start
    fits = [m for m, ok in trials.items() if ok]
    if not fits:  # even the start ran out of memory: halve until one trains
        smallest = min(trials)
        return smallest // 2 or None
    best = max(fits)
    above = [m for m, ok in trials.items() if not ok and m > best]
    if not above:
        return min(2 * best, limit) if best < limit else None
    gap = min(above)
    return (best + gap) // 2 if gap - best > 1 else None


def boundary(trials: Dict[int, bool], limit: int) -> dict:
    """The answer from the trials: the largest micro-batch that trained, and whether the limit cut the search."""
    fits = [m for m, ok in trials.items() if ok]
    best = max(fits) if fits else 0
    return {"measured_max_micro": best, "bounded_by_limit": best >= limit,
            "smallest_oom_micro": min((m for m, ok in trials.items() if not ok and m > best), default=None)}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trl_ds.worker.fit")
    parser.add_argument("run_dir")
    parser.add_argument("--start", type=int, required=True, help="the first micro-batch (the planner's largest)")
    parser.add_argument("--limit", type=int, required=True, help="never try more than this")
    parser.add_argument("--steps", type=int, default=3, help="training steps per micro-batch")
    # Fault injection for the CPU smoke, where nothing runs out of memory: an OutOfMemoryError raised inside the
    # forward (after the decoder's layers ran, ZeRO-3 having gathered and released them) for larger batches
    parser.add_argument("--simulate-oom-above", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    path = os.path.join(run_dir, FIT_FILE)
    record = read_json(path) if os.path.exists(path) else {"start": args.start, "limit": args.limit,
                                                            "steps": args.steps, "trials": [], "engine_builds": 0}
    trainer, model, rows = build_engine(run_dir, args.steps * 64)
    record["engine_builds"] += 1
    if args.simulate_oom_above is not None:
        simulate_oom(trainer.model, args.simulate_oom_above)
    while True:
        trials = {t["micro_batch"]: t["status"] == "trained" for t in record["trials"] if t["status"] != "error"}
        micro = next_micro(trials, args.start, args.limit)
        if micro is None:
            break
        trial = try_micro(trainer, model, rows, micro, args.steps)
        record["trials"].append(trial)
        write_json(path, record)
        print(f"trl_ds fit: micro-batch {micro}: {trial['status']}", flush=True)
        if trial["status"] == "error":  # after an OOM: a fresh process continues from fit.json; else a bug
            return ENGINE_BROKEN if any(t["status"] == "oom" for t in record["trials"]) else 1
    record.update(boundary(trials, args.limit))
    best = record["measured_max_micro"]
    if best:  # its peak, measured last: after every size, as a job that trains at this size would not be
        trial = {**try_micro(trainer, model, rows, best, args.steps), "confirm": True}
        record["trials"].append(trial)
        record["at_max"] = trial
        record["confirmed"] = trial["status"] == "trained"  # false: it trained once, not after the others
    write_json(path, record)
    return 0


def build_engine(run_dir: str, max_steps: int):
    """The run dir's trainer and its DeepSpeed engine, made as Trainer.train makes them, without training."""
    from trl_ds.worker.bootstrap import start_rank
    from trl_ds.worker.train import build_trainer

    cfg = load_run_config(run_dir)
    start_rank(run_dir, cfg, joins_a_launch=False)  # the ranks' start-up (worker/bootstrap.py)
    trainer = build_trainer(cfg, run_dir)
    model, _ = trainer._prepare_for_training(max_steps, trainer.get_train_dataloader(), None)
    trainer.current_gradient_accumulation_steps = 1  # the training loop sets it per step (a loss without
    # num_items_in_batch, DPO's, is divided by it)
    # The columns the trainer's collator takes, as its own dataloader gives them
    return trainer, model, trainer._remove_unused_columns(trainer.train_dataset, description="fit")


def batch(trainer, rows, micro: int, step: int) -> dict:
    """`micro` rows of the trainer's own dataset through its own collator (rows repeat when there are fewer)."""
    return trainer.data_collator([rows[(step * micro + i) % len(rows)] for i in range(micro)])


def try_micro(trainer, model, rows, micro: int, steps: int) -> dict:
    """`steps` training steps at this micro-batch: trained, oom, or error (anything else), with peak memory."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trial = {"micro_batch": micro, "steps": 0, "losses": [], "seconds": []}
    try:
        for step in range(steps):
            began = time.perf_counter()
            inputs = batch(trainer, rows, micro, step)
            items = trainer._get_num_items_in_batch([inputs], trainer.args.device)
            loss = float(trainer.training_step(model, inputs, items))
            trial["seconds"].append(round(time.perf_counter() - began, 4))
            trial["losses"].append(loss)
            trial["steps"] += 1
        trial["status"] = "trained" if all(math.isfinite(x) for x in trial["losses"]) else "error"
    except torch.cuda.OutOfMemoryError as err:
        trial.update(status="oom", error=first_line(err))
    except Exception as err:  # after an out-of-memory error the engine may be left unusable: say so, end
        trial.update(status="error", error=f"{type(err).__name__}: {first_line(err)}")
    if cuda:
        trial.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                     peak_reserved_bytes=torch.cuda.max_memory_reserved())
    if trial["status"] != "trained":
        release(model)
    return trial


def first_line(err: Exception) -> str:
    text = str(err)
    return text.splitlines()[0][:300] if text else ""


def release(model) -> None:
    """What a failed step left: gradients, ZeRO-3's gathered parameters, the allocator's cached blocks."""
    import torch

    for clear in (lambda: model.zero_grad(), lambda: model.empty_partition_cache()):
        try:
            clear()
        except Exception:  # not every stage has every cache; what cannot be cleared, the next trial will show
            pass
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def simulate_oom(model, above: int) -> None:
    import torch

    def hook(module, inputs, output):
        if output[0].shape[0] > above:
            raise torch.cuda.OutOfMemoryError(f"simulated: micro-batch {output[0].shape[0]} > {above}")

    # The decoder, not the head: the trainers' loss may read the head's weight without calling it (a fused loss)
    model.get_decoder().register_forward_hook(hook)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
