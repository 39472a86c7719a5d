"""What the launching process prints: the dry-run commands, or the outcome of the run."""
import glob
import os
import re
import sys
from typing import Optional

import yaml

from trl_ds.config.model_source import display_name
from trl_ds.config.partial_batch import count_rows, epoch_end_text
from trl_ds.config.topology import topology
from trl_ds.config.training_steps import describe as describe_steps
from trl_ds.config.training_steps import steps_per_epoch
from trl_ds.config.values import dtype, offloads, sp_size, value, world_size
from trl_ds.launch.launchers import launcher_of
from trl_ds.launch.run import failed_rank_log, tail
from trl_ds.launch.script import format_command
from trl_ds.rundir.disk_space import remove_incomplete
from trl_ds.rundir.layout import (
    MEMORY_DIR,
    OVERRIDES,
    SUMMARY,
    read_json,
    read_summary,
    write_json,
    write_text,
)
from trl_ds.rundir.lifeline import this_launch_id

MiB = 2 ** 20
DISK_FULL = "DiskFullError: "  # how trl_ds.worker.train reports a write that found the disk full or read-only
# The exception a rank died of, as Python prints it last ("[rank0]: ConnectionError: Couldn't reach ...").
ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b.*)$")


def describe(cfg) -> str:
    c = cfg.cluster
    where = offloads(cfg)
    return (f"{c.nodes} node(s) × {c.gpus_per_node} {value(c.device)} rank(s) = world {world_size(cfg)}, "
            f"ZeRO stage {cfg.zero.stage}, offload optimizer={where['optimizer']} param={where['param']}, "
            f"{dtype(cfg)}, model {display_name(cfg.model)}" + (f", script {cfg.script}" if cfg.get("script") else ""))


def print_dry_run(cfg, prepared) -> None:
    print(f"trl_ds dry run: {describe(cfg)}")
    print(batch_line(cfg, prepared))
    epoch_end = epoch_end_of(cfg, prepared)
    if epoch_end:
        print(f"  epoch end: {epoch_end}")
    print(f"  run dir: {prepared.run_dir}")
    hint = launcher_of(cfg).submit_hint
    if hint:
        print(f"  submit: {hint(prepared.run_dir)}")
    print("  launch commands (bash launch.sh NODE_RANK runs the same):")
    for rank, cmd in enumerate(prepared.node_commands):
        print(f"    node {rank}: {format_command(cmd)}")


def epoch_end_of(cfg, prepared):
    """What happens to the rows left over at each epoch's end, when the data is not a multiple of the batch and the
    run's optimizer steps reach the end of its first epoch (a short trainer.max_steps never gets there)."""
    rows, drop_last = count_rows(cfg.trainer.dataset_name), cfg.trainer.dataloader_drop_last
    steps = prepared.plan.get("training", {}).get("optimizer_steps")
    if rows and steps is not None and steps < steps_per_epoch(rows, prepared.batch, drop_last):
        return None
    return epoch_end_text(rows, prepared.batch.global_size, drop_last)


def batch_line(cfg, prepared) -> str:
    """The batch arithmetic and the optimizer steps it makes, printed before launch (dry run or not)."""
    b = prepared.batch
    world = f"world {b.world}" if sp_size(cfg) == 1 else \
        f"data-parallel world {b.world} (world {world_size(cfg)} / sp.size {sp_size(cfg)})"
    if topology(cfg).tp_size > 1:  # tp=autotp: all three dimensions
        world = f"data-parallel world {b.world} (world {world_size(cfg)} = {topology(cfg).describe()})"
    run = prepared.plan.get("whole_run", {}).get("current")
    return (f"  batch: global {b.global_size} = micro {b.micro} × {world} × accumulation {b.accumulation}; "
            f"{describe_steps(prepared.plan['training'])}" + (f"\n  time: {run['text']}" if run else ""))


def record_skipped(run_dir: str, overrides, err) -> None:
    """A sweep point whose config is invalid: one line on stderr, the reason in its summary.json."""
    print(f"trl_ds: skipping point {' '.join(overrides)}: {' / '.join(err.problems)}", file=sys.stderr)
    write_text(os.path.join(run_dir, OVERRIDES), yaml.safe_dump(list(overrides)))  # the point's coordinates
    write_json(os.path.join(run_dir, SUMMARY),
               {"status": "skipped", "reason": " / ".join(err.problems), "run_dir": run_dir})


def record_stopped(run_dir: str, stop, wall_seconds: float, writes_summary: bool) -> None:
    """The launch was stopped by a signal (this node's launcher and ranks are gone): one line, no traceback."""
    reason = f"stopped by {stop}"
    if writes_summary:
        write_json(os.path.join(run_dir, SUMMARY), {"status": "stopped", "reason": reason, "run_dir": run_dir,
                                                    "launch_id": this_launch_id(),
                                                           "wall_seconds": round(wall_seconds, 3)})
    print(f"trl_ds: launch {reason}: this node's launcher and ranks were ended. To resume from the newest complete "
          f"checkpoint, rerun the command with hydra.run.dir={run_dir}", file=sys.stderr)


def record_failed(run_dir: str, summary: dict) -> None:
    """summary.json says failed; on a disk that cannot take even that, one line says so instead of a traceback."""
    path = os.path.join(run_dir, SUMMARY)
    try:
        write_json(path, {**summary, "launch_id": this_launch_id()})
    except OSError as err:
        print(f"trl_ds: could not write {path}: {err.strerror}", file=sys.stderr)


def print_summary(cfg, prepared, returncode: int, wall_seconds: float) -> None:
    run_dir = prepared.run_dir
    path = os.path.join(run_dir, SUMMARY)
    if returncode != 0 or not os.path.exists(path):
        log = script_output_log(failed_rank_log(run_dir))
        reason = failure_reason(log, returncode)
        if DISK_FULL in reason:  # a save cut short: its files only take the space a rerun needs
            removed = remove_incomplete(run_dir)
            reason += f"; removed the incomplete {removed}" if removed else ""
        failed = {"status": "failed", "reason": reason, "log": log, "run_dir": run_dir,
                  "wall_seconds": round(wall_seconds, 3), "exit_code": returncode or 1}
        record_failed(run_dir, failed)
        print_outcome(cfg, run_dir, failed)  # from memory: a full disk may have kept summary.json from being written
        return
    # this launch's id: rank 0 may run on another node (c10d), whose launcher's id its own summary carries
    s = {**read_json(path), "wall_seconds": round(wall_seconds, 3), "launch_id": this_launch_id()}
    epoch_end = epoch_end_of(cfg, prepared)
    if epoch_end:
        s["epoch_end"] = epoch_end
    write_json(path, s)
    print_outcome(cfg, run_dir)


def print_outcome(cfg, run_dir: str, s: Optional[dict] = None) -> None:
    """The run's outcome from its summary.json (or `s`): what `python -m trl_ds` prints at the end, and `watch` too."""
    s = s or read_summary(run_dir)
    if s["status"] != "completed":
        print(f"trl_ds: run {s['status'].upper()} ({s.get('reason', '')}); {describe(cfg)}")
        if s.get("log"):
            print(f"  first failing rank's log: {s['log']}")
        if s.get("log") and os.path.exists(s["log"]):
            print(tail(s["log"]))
        print(f"  run dir: {run_dir}")
        return
    differed = " (as planned; the engine differed: see below)" if s.get("engine_differences") else ""
    print(f"trl_ds: run {s['status']}: {describe(cfg)}{differed}")
    if s.get("missing"):  # script=: a script that trained no transformers Trainer (worker/script.py)
        print(f"  not recorded   {', '.join(s['missing'])}: {s['missing_why']}\n  run dir: {run_dir}")
        return
    print(f"  final loss     {loss_text(s)}")
    if s.get("eval_loss") is not None:
        print(f"  eval loss      {s['eval_loss']:.4f} at step {s['eval_step']} ({s['evaluations']} evaluations)")
    rate = s.get("samples_per_second")
    print(f"  throughput     {'not reported' if rate is None else f'{rate:.2f} samples/s'}, "
          f"{s['train_seconds']:.1f} s training")
    joined = "" if s["world_size"] == world_size(cfg) else \
        f"; {s['world_size']} of {world_size(cfg)} planned ranks joined (launcher.min_nodes), global batch " \
        f"{s['global_batch']} kept"
    print(f"  world size     {s['world_size']} ({s['distributed_type']}, {s['device']}){joined}")
    if s.get("epoch_end"):
        print(f"  epoch end      {s['epoch_end']}")
    for mem_path in sorted(glob.glob(os.path.join(glob.escape(run_dir), MEMORY_DIR, "rank_*.json"))):
        print(f"  memory         {format_memory(read_json(mem_path))}")
    print(f"  run dir        {run_dir}")
    for diff in s.get("engine_differences") or []:
        print(f"trl_ds: WARNING: {engine_line(diff)}", file=sys.stderr)


def loss_text(s: dict) -> str:
    """A run that trained but logged no loss (a script's own logging_steps beyond its steps) says so."""
    if s.get("final_loss") is None:
        return (f"no logged loss after {s['steps']} steps (nothing was logged: the trainer's logging_steps="
                f"{s.get('logging_steps', '?')} is more than the steps trained)")
    mean = "" if s.get("mean_loss") is None else f" (mean {s['mean_loss']:.4f})"
    return f"{s['final_loss']:.4f} after {s['steps']} steps{mean}"


def engine_line(diff: dict) -> str:
    """One difference between the engine a rank built and the run dir (worker/engine_check.py)."""
    line = f"the engine ran {diff['name']} {diff['engine']}; the run dir says {diff['run_dir']}"
    return f"{line}: {diff['cause']}" if diff.get("cause") else line


def script_output_log(log: Optional[str]) -> Optional[str]:
    """The log that holds the failing rank's last output: its stdout.log where its stderr.log is empty (a script that
    printed its error and exited)."""
    if not log or os.path.basename(log) != "stderr.log" or _has_text(log):
        return log
    stdout = os.path.join(os.path.dirname(log), "stdout.log")
    return stdout if _has_text(stdout) else log


def _has_text(path: str) -> bool:
    try:
        with open(path, errors="replace") as f:
            return bool(f.read().strip())
    except OSError:
        return False


def failure_reason(log, returncode: int) -> str:
    """What a sweep's report shows for a failed point: the failing rank's last exception line, when there is one."""
    exit_text = f"launcher exited with code {returncode}"
    if not log or not os.path.exists(log):
        return exit_text
    with open(log, errors="replace") as f:
        errors = [m.group(1) for m in map(ERROR_LINE.match, f.read().splitlines()) if m]
    return f"{errors[-1][:500]} ({exit_text})" if errors else exit_text  # room for a path or two


def format_memory(m: dict) -> str:
    states = {kind: sum(by_device.values()) for kind, by_device in m["model_states"].items()}
    text = (f"rank {m['rank']}: peak RSS {m['peak_rss_bytes'] / MiB:.0f} MiB; model states "
            f"{sum(states.values()) / MiB:.2f} MiB (params {states['params'] / MiB:.2f}, "
            f"grads {states['gradients'] / MiB:.2f}, optimizer {states['optimizer'] / MiB:.2f})")
    if "gpu_peak_allocated_bytes" in m:
        text += (f"; GPU peak allocated {m['gpu_peak_allocated_bytes'] / MiB:.0f} MiB, "
                 f"reserved {m['gpu_peak_reserved_bytes'] / MiB:.0f} MiB")
    return text
