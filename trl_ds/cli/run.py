"""`trl-ds run [overrides]` (= `python -m trl_ds`): compose → check → build → write the run dir → launch this node.

Hydra runs here only, once; ranks read the run dir. A user mistake prints one message and exits with code 2
before anything spawns.
"""
import os
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from trl_ds.check.history import finished_run
from trl_ds.config.compose import CONFIG_DIR, CONFIG_NAME, HYDRA_VERSION_BASE
from trl_ds.config.schema import register
from trl_ds.config.undeclared_keys import as_added
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.launch.summary import (
    batch_line,
    describe,
    print_dry_run,
    print_summary,
    record_failed,
    record_skipped,
    record_stopped,
)
from trl_ds.rundir.disk_space import full_disk_line, is_disk_full
from trl_ds.short_lived import pause_collection, resume_collection

_task_started = False


@hydra.main(config_path=CONFIG_DIR, config_name=CONFIG_NAME, version_base=HYDRA_VERSION_BASE)
def app(cfg) -> None:
    global _task_started
    _task_started = True
    from trl_ds.launch import summarizes_here, this_node_rank
    from trl_ds.launch.run import Stopped, raise_stopped
    from trl_ds.launch.run_dir_lock import RunDirLock

    hydra_cfg = HydraConfig.get()
    run_dir = os.path.abspath(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    lock = RunDirLock(run_dir, this_node_rank(cfg))  # each node of a SLURM job has its own lock in a shared run dir
    try:
        lock.acquire()  # before anything is written: one launch per run dir (and node) at a time
    except ConfigError as err:
        print(f"trl_ds: {err.render()}", file=sys.stderr)  # a sweep point too: its run dir is another launch's
        if multirun:
            return
        sys.exit(EXIT_USER_ERROR)
    except OSError as err:
        _disk_failure(err, run_dir)
    previous = signal.signal(signal.SIGTERM, raise_stopped)  # a stop before the launch also releases the lock
    started = time.time()
    try:
        _launch(cfg, run_dir, multirun, hydra_cfg, started)
    except Stopped as stop:  # a sweep stops too: the signal was for the whole command
        record_stopped(run_dir, stop, time.time() - started, summarizes_here(cfg))
        sys.exit(128 + stop.signum)
    except KeyboardInterrupt:
        record_stopped(run_dir, Stopped(signal.SIGINT), time.time() - started, summarizes_here(cfg))
        sys.exit(128 + signal.SIGINT)
    except OSError as err:  # the launcher's own writes: the run dir's files, logs, summary.json
        _disk_failure(err, run_dir)
    finally:
        signal.signal(signal.SIGTERM, previous)
        lock.release()
        _remove_if_empty(run_dir)


def _launch(cfg, run_dir: str, multirun: bool, hydra_cfg, started: float) -> None:
    from trl_ds.cli.app import build, write_run_dir
    from trl_ds.launch import start, summarizes_here

    try:
        prepared = build(cfg, run_dir, launching=not cfg.dry_run)
        if not cfg.dry_run:
            from trl_ds.cli.doctor import preflight

            preflight(cfg)  # the hosts and their network, before anything is written or spawned
    except ConfigError as err:
        _refuse(err, run_dir, multirun, hydra_cfg)
        return
    finished = None if cfg.dry_run else finished_run(cfg, run_dir)
    if finished:
        from trl_ds.rundir.layout import adopt_summary

        adopt_summary(run_dir)  # a copied run dir's summary.json names the copy
        print(f"trl_ds: {finished}")
        return
    write_run_dir(cfg, prepared, overrides=list(hydra_cfg.overrides.task))
    if cfg.dry_run:
        print_dry_run(cfg, prepared)
        return
    if cfg.script:
        from trl_ds.check.script import parser_verdict

        refused = parser_verdict(cfg, run_dir)  # needs the run dir's files; spawns no rank
        if refused:
            _refuse(ConfigError(refused), run_dir, multirun, hydra_cfg)
            return
    # Before ready_resume (minutes): a launch stopped there writes a summary.json naming it, which watch and report
    # compare with latest_launch (layout.py summary_is_latest)
    if summarizes_here(cfg):
        from trl_ds.rundir.layout import LATEST_LAUNCH, write_text
        from trl_ds.rundir.lifeline import this_launch_id

        write_text(os.path.join(run_dir, LATEST_LAUNCH), this_launch_id() + "\n")
    print(f"trl_ds: launching: {describe(cfg)}\n{batch_line(cfg, prepared)}")
    ready_resume(cfg, run_dir, prepared.batch)  # minutes, when it converts a checkpoint
    resume_collection()  # the launcher may now wait for hours
    rc = start(cfg, prepared.node_commands)
    if not summarizes_here(cfg):  # a submitted SLURM job, or a node without rank 0: start() said what happened
        if rc != 0 and not multirun:
            sys.exit(rc)
        return
    print_summary(cfg, prepared, rc, wall_seconds=time.time() - started)
    if rc != 0 and not multirun:
        sys.exit(EXIT_USER_ERROR if rc == EXIT_USER_ERROR else 1)  # 2: a node or a rank refused the config


def ready_resume(cfg, run_dir: str, batch=None) -> None:
    """Set aside damaged checkpoints and convert one of another cluster shape before spawning: the lines reach this
    terminal (ranks write to their logs). The main node only: it owns the run dir's checkpoints."""
    from trl_ds.launch import this_node_rank

    if cfg.resume != "auto" or this_node_rank(cfg) != 0:
        return
    from trl_ds.config.values import world_size
    from trl_ds.rundir.layout import CHECKPOINT_DIR
    from trl_ds.rundir.resume import prepare_resume
    from trl_ds.rundir.universal import sub_groups

    converting = (f"trl_ds: launch failed: converting the newest checkpoint in {run_dir}/{CHECKPOINT_DIR} to "
                  f"DeepSpeed's universal format")
    try:
        chosen, _, lines = prepare_resume(os.path.join(run_dir, CHECKPOINT_DIR), world_size(cfg), cfg.zero.stage,
                                          sub_groups(cfg))
    except subprocess.CalledProcessError as err:  # ds_to_universal failed: its own output above says why
        print(f"{converting} failed ({' '.join(err.cmd)} exited with {err.returncode}, run in that checkpoint); "
              f"the checkpoints are unchanged", file=sys.stderr)
        sys.exit(1)
    except subprocess.TimeoutExpired as err:  # ended (killed) at its limit, rundir/universal.py convert_limit_s
        print(f"{converting} did not finish within {max(err.timeout, 0):.0f} s ({err.cmd[2]} was ended); the "
              f"checkpoints are unchanged. Rerun to convert again, or resume on the shape that wrote it",
              file=sys.stderr)
        sys.exit(1)
    for line in lines + ([batch_change_line(cfg, chosen, batch)] if chosen and batch else []):
        if line:
            print(line, file=sys.stderr, flush=True)


def batch_change_line(cfg, checkpoint: str, batch) -> Optional[str]:
    """Without batch.global_size the global batch follows the world size: resuming on another one changes the
    batches the rest of the run trains on. Said, with the setting that keeps the checkpoint's."""
    from trl_ds.config.topology import topology
    from trl_ds.rundir.checkpoint import read_marker

    before, topo = read_marker(checkpoint).get("world_size"), topology(cfg)  # the marker holds the whole world
    if cfg.batch.global_size is not None or not isinstance(before, int) or before == topo.world \
            or before % topo.shares_samples:
        return None
    was = batch.micro * (before // topo.shares_samples) * batch.accumulation  # tp × sp ranks share each sample
    return (f"trl_ds: warning: batch.global_size is not set, so the global batch follows the world size: {was} "
            f"samples per step when {os.path.basename(checkpoint)} was written ({_ranks(before)}), "
            f"{batch.global_size} now ({_ranks(topo.world)}). Set batch.global_size={was} to keep it.")


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _disk_failure(err: OSError, run_dir: str) -> None:
    """A full or read-only disk under the launcher's own writes: one line and exit 1; other errors are bugs."""
    if not is_disk_full(err):
        raise err
    line = full_disk_line(err.filename or run_dir, run_dir, err)
    print(f"trl_ds: launch failed: {line}", file=sys.stderr)
    record_failed(run_dir, {"status": "failed", "reason": line, "run_dir": run_dir})
    sys.exit(1)


def _refuse(err: ConfigError, run_dir: str, multirun: bool, hydra_cfg) -> None:
    """A user mistake: one message and exit 2; in a sweep the point is skipped with its reason and the sweep goes on."""
    if multirun:
        record_skipped(run_dir, list(hydra_cfg.overrides.task), err)
        return
    print(f"trl_ds: {err.render()}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def _remove_if_empty(run_dir: str) -> None:
    """A rejected config leaves no run dir behind (Hydra makes an empty one before the app runs)."""
    try:
        if os.path.isdir(run_dir) and not os.listdir(run_dir):
            os.rmdir(run_dir)
    except OSError:  # a read-only disk: it stays, empty
        pass


RUN_DIR_KEYS = ("hydra.run.dir=", "hydra.sweep.dir=", "hydra.sweep.subdir=")
GRAMMAR_CHARS = "[]{}(),='\""  # for the message: what Hydra reads as lists, dicts, calls, sweeps


def name_too_long(args: Sequence[str]) -> Optional[str]:
    """A run dir name the file system cannot hold, or one Hydra would misread (a bracket outside quotes)."""
    for arg in args:
        key = next((k for k in RUN_DIR_KEYS if arg.lstrip("+").startswith(k)), None)
        if key is None:
            continue
        given, parsed = arg.lstrip("+")[len(key):], _hydra_value(arg)
        if parsed is None:
            return (f"{key}{given} holds characters Hydra's override grammar reads as syntax ({GRAMMAR_CHARS}) or "
                    f"does not take unquoted (non-ASCII); "
                    f"quote the path for Hydra: '{key}\"{given}\"'")
        path = os.path.abspath(os.path.expanduser(parsed))
        limit = _name_max(path)
        for part in path.split(os.sep):
            if len(os.fsencode(part)) > limit:
                return (f"{key[:-1]} has a folder name of {len(os.fsencode(part))} bytes ({part[:40]}...); this file "
                        f"system allows {limit}. Use a shorter name in {key}...")
        if len(os.fsencode(path)) >= 4096:
            return f"{key[:-1]} is {len(os.fsencode(path))} bytes long; Linux allows 4095. Use a shorter path."
    return None


def _hydra_value(arg: str) -> Optional[str]:
    """The path Hydra's override parser reads from `arg`; None for a refused, sweep, list or dict value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        override = OverridesParser.create().parse_overrides([arg])[0]
    except OverrideParseException:
        return None
    value = override.value()
    return None if override.is_sweep_override() or isinstance(value, (list, dict)) else str(value)


def _name_max(path: str) -> int:
    """NAME_MAX of the file system holding the path's nearest existing folder (255 on Linux's usual ones)."""
    while path and not os.path.isdir(path):
        path = os.path.dirname(path)
    try:
        return os.pathconf(path or "/", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _skip_mode_probe() -> None:
    """Hydra 1.3 composes the whole config once just to read `hydra.mode`, which trl_ds never sets: one compose less."""
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Hydra reads sys.argv itself; `argv`, when given, replaces the arguments after the program name."""
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    too_long = name_too_long(sys.argv[1:])
    if too_long:
        print(f"trl_ds: {too_long}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    pause_collection()
    register()
    sys.argv = [sys.argv[0], *as_added(sys.argv[1:])]  # a misspelt key without `+` is answered like one with it
    _skip_mode_probe()
    try:
        app()
    except SystemExit as exit_:
        # Hydra exits 1 on a composition error (unknown option, misspelled key, wrong type): a user mistake.
        if exit_.code == 1 and not _task_started:
            sys.exit(EXIT_USER_ERROR)
        raise


if __name__ == "__main__":
    main()
