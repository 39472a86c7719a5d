"""`trl-ds watch RUN_DIR [--every S]`: attach to a run dir, running or finished, here or on a shared filesystem;
show its state and progress until it ends; exit with the run's own status.

A finished run prints its summary and exits at once: 0 completed, 1 failed, 128+signal stopped, 2 skipped. A launch
is running while its launcher holds the run dir's lock, or, for launcher=slurm, while its job is queued. A
summary.json of an earlier launch than the latest (rundir/layout.py summary_is_latest) means the latest ended
without one (killed), and watch says so.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from trl_ds.errors import EXIT_USER_ERROR
from trl_ds.launch.progress import Display, MetricsTail, Progress, read_peaks, total_steps
from trl_ds.rundir.layout import (
    CHECKPOINT_DIR,
    CHECKPOINT_MARKER,
    LOGS_DIR,
    METRICS,
    RESOLVED_CONFIG,
    SLURM_JOB_ID,
    SUMMARY,
    read_summary,
    summary_is_latest,
)

START_GRACE_S = 30  # a run dir with neither a running launch nor a summary: wait this long for a launch to start
SQUEUE_TIMEOUT_S = 30  # a busy controller answers within seconds; one that does not is named, not waited on


def exit_status(summary: dict) -> int:
    status = summary.get("status")
    if status == "completed":
        return 0
    if status == "stopped":
        name = summary.get("reason", "").rsplit(" ", 1)[-1]
        return 128 + (signal.Signals[name].value if name in signal.Signals.__members__ else signal.SIGTERM.value)
    if status == "skipped":
        return EXIT_USER_ERROR
    return summary.get("exit_code") or 1


class SqueueNoAnswer(Exception):
    """squeue did not answer within SQUEUE_TIMEOUT_S: the job's state is unknown."""


def slurm_job_running(job_id: str) -> bool:
    """The job is pending or running in SLURM's queue (not merely listed after it ended)."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                             timeout=SQUEUE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SqueueNoAnswer(f"trl_ds watch: squeue -j {job_id} did not answer within {SQUEUE_TIMEOUT_S} s (is "
                             f"SLURM's controller up? sinfo says); the job's state is unknown. Watch it again later "
                             f"with trl-ds watch RUN_DIR") from None
    return out.returncode == 0 and out.stdout.strip() in ("PENDING", "CONFIGURING", "RUNNING", "REQUEUED",
                                                          "COMPLETING", "SUSPENDED", "RESIZING")


def job_id(run_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(run_dir, SLURM_JOB_ID)) as f:
            return f.read().strip() or None
    except OSError:
        return None


def running_since(run_dir: str, job: Optional[str]) -> Optional[float]:
    """When the run's launch started, while it runs: a launcher's lock here, or a SLURM job in the queue."""
    since = lock_since(run_dir)
    if since is None and job and shutil.which("squeue") and slurm_job_running(job):
        return os.path.getmtime(os.path.join(run_dir, RESOLVED_CONFIG))
    return since


def lock_since(run_dir: str) -> Optional[float]:
    """When the running launch took the run dir's lock; None when none runs. A lock held on another host counts as
    running until a summary newer than the lock appears (a shared filesystem)."""
    from trl_ds.launch.run_dir_lock import lock_path, read_holder, stale_reason

    path = lock_path(run_dir, 0)
    try:
        since = os.path.getmtime(path)
    except OSError:
        return None
    holder = read_holder(path)
    if holder and holder.get("host") != socket.gethostname():
        summary = os.path.join(run_dir, SUMMARY)
        return None if os.path.exists(summary) and os.path.getmtime(summary) > since else since
    return since if stale_reason(holder, run_dir, path) is None else None


def state(run_dir: str, progress: Progress) -> str:
    """starting, training or checkpointing, from the run dir's files."""
    trainer_dir = os.path.join(run_dir, CHECKPOINT_DIR)
    if os.path.isdir(trainer_dir):
        unmarked = [n for n in os.listdir(trainer_dir) if n.startswith("checkpoint-")
                    and not os.path.exists(os.path.join(trainer_dir, n, CHECKPOINT_MARKER))]
        if unmarked:
            return "checkpointing"
    return "training" if progress.step else "starting"


def watch(run_dir: str, every_s: float, stream=sys.stderr, job: Optional[str] = None) -> int:
    job = job or job_id(run_dir)
    waited = time.time()
    while (since := running_since(run_dir, job)) is None:
        if os.path.exists(os.path.join(run_dir, SUMMARY)):
            return finished(run_dir)
        if job and job_failed(run_dir, job):
            return 1
        if time.time() - waited > START_GRACE_S:
            print(f"trl_ds watch: no launch is running in {run_dir} and it holds no {SUMMARY}: its launcher ended "
                  f"without one (killed?). Logs: {os.path.join(run_dir, LOGS_DIR)}", file=sys.stderr)
            return 1
        time.sleep(0.5 if job is None else 2.0)
    print(f"trl_ds watch: {run_dir} is running; logs in {os.path.join(run_dir, LOGS_DIR)}", file=stream)
    tail = MetricsTail(os.path.join(run_dir, METRICS))
    progress = Progress(total_steps(run_dir), started=since)
    display = Display(progress, stream, every_s, prefix="trl_ds watch: ")
    shown = None
    while running_since(run_dir, job) is not None:
        progress.add(tail.read())
        progress.peaks = read_peaks(run_dir) or progress.peaks
        if not display.live and state(run_dir, progress) != shown:
            shown = state(run_dir, progress)
            print(f"trl_ds watch: {shown}", file=stream)
        display.update()
        time.sleep(0.5 if job is None else 2.0)  # squeue is a call to the controller
    display.close()
    if not os.path.exists(os.path.join(run_dir, SUMMARY)):
        return 1 if job and job_failed(run_dir, job) else ended_without_summary(run_dir)
    return finished(run_dir)


def job_failed(run_dir: str, job: str) -> bool:
    """A SLURM job whose ranks failed writes no summary.json: the rank that failed first, from its error file."""
    from omegaconf.errors import OmegaConfBaseException

    from trl_ds.launch.failure import slurm_job_failure
    from trl_ds.rundir.layout import load_run_config

    try:
        failure = slurm_job_failure(run_dir, job, load_run_config(run_dir).cluster.gpus_per_node)
    except (OSError, ValueError, OmegaConfBaseException):  # config.yaml gone or damaged: no rank to name
        return False
    if failure:
        print(f"trl_ds watch: SLURM job {job} failed: {failure.message}", file=sys.stderr)
    return failure is not None


def ended_without_summary(run_dir: str, earlier: str = "") -> int:
    print(f"trl_ds watch: the latest launch in {run_dir} ended without writing its {SUMMARY} (its launcher was "
          f"killed?){earlier}. Logs: {os.path.join(run_dir, LOGS_DIR)}; rerun the same command to resume it.",
          file=sys.stderr)
    return 1


def finished(run_dir: str) -> int:
    """The latest launch's outcome from summary.json; an earlier launch's or a cut one is said to be so."""
    from trl_ds.launch.summary import print_outcome
    from trl_ds.rundir.layout import load_run_config

    path = os.path.join(run_dir, SUMMARY)
    summary = read_summary(run_dir)  # a copied run dir's names the copy
    if not isinstance(summary, dict) or "status" not in summary:
        print(f"trl_ds watch: {path} is empty or cut short (a kill while it was written); rerun the same command to "
              f"finish the run and rewrite it. Logs: {os.path.join(run_dir, LOGS_DIR)}", file=sys.stderr)
        return 1
    if not summary_is_latest(run_dir):
        steps = f" after {summary['steps']} steps" if summary.get("steps") is not None else ""
        return ended_without_summary(run_dir, f"; the {SUMMARY} there is an earlier launch's ({summary['status']}"
                                              f"{steps})")
    from omegaconf.errors import OmegaConfBaseException

    try:
        print_outcome(load_run_config(run_dir), run_dir, summary)
    except (KeyError, TypeError, ValueError, OmegaConfBaseException) as err:  # a damaged config.yaml, another version
        steps = f" after {summary['steps']} steps" if summary.get("steps") is not None else ""
        print(f"trl_ds: run {summary['status']}{steps} (not shown in full: {type(err).__name__} reading "
              f"{RESOLVED_CONFIG} or {SUMMARY}); run dir: {run_dir}")
    return exit_status(summary)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="trl-ds watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--every", type=float, default=30.0, metavar="S",
                        help="seconds between progress lines when the output is not a terminal (default 30)")
    parser.add_argument("--job", help="the SLURM job running it (default: the one trl_ds submitted, if any)")
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    if not os.path.exists(os.path.join(run_dir, RESOLVED_CONFIG)):
        print(f"trl_ds watch: {run_dir} is not a run dir (no config.yaml). Give the folder python -m trl_ds printed "
              f"as its run dir.", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        return watch(run_dir, args.every, job=args.job or None)
    except KeyboardInterrupt:
        return 130  # the watch ends; the run goes on
    except SqueueNoAnswer as err:
        print(str(err).replace("RUN_DIR", run_dir), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
