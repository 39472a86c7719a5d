"""`trl-ds run [overrides]` (= `python -m trl_ds`): compose → check → build → write the run dir → launch this node.

Hydra runs here only, once; ranks read the run dir. A user mistake prints one message and exits with code 2
before anything spawns.
"""
import os
import sys
import time
from typing import Optional, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from trl_ds.config.compose import CONFIG_DIR, CONFIG_NAME, HYDRA_VERSION_BASE
from trl_ds.config.schema import register
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.launch.summary import print_dry_run, print_summary, record_skipped, record_stopped
from trl_ds.short_lived import pause_collection, resume_collection

_task_started = False


@hydra.main(config_path=CONFIG_DIR, config_name=CONFIG_NAME, version_base=HYDRA_VERSION_BASE)
def app(cfg) -> None:
    global _task_started
    _task_started = True
    from trl_ds.cli.app import build, write_run_dir
    from trl_ds.launch import start, summarizes_here
    from trl_ds.launch.run import Stopped

    hydra_cfg = HydraConfig.get()
    run_dir = os.path.abspath(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        prepared = build(cfg, run_dir, launching=not cfg.dry_run)
        if not cfg.dry_run:
            from trl_ds.cli.doctor import preflight

            preflight(cfg)  # the hosts and their network, before anything is written or spawned
    except ConfigError as err:
        if multirun:  # an invalid point of a sweep is skipped with its reason; the sweep goes on
            record_skipped(run_dir, list(hydra_cfg.overrides.task), err)
            return
        print(f"trl_ds: {err.render()}", file=sys.stderr)
        _remove_if_empty(run_dir)
        sys.exit(EXIT_USER_ERROR)
    write_run_dir(cfg, prepared, overrides=list(hydra_cfg.overrides.task))
    if cfg.dry_run:
        print_dry_run(cfg, prepared)
        return
    resume_collection()  # the launcher may now wait for hours
    started = time.time()
    try:
        rc = start(cfg, prepared.node_commands)
    except Stopped as stop:  # a sweep stops too: the signal was for the whole command
        record_stopped(run_dir, stop, time.time() - started, summarizes_here(cfg))
        sys.exit(128 + stop.signum)
    if not summarizes_here(cfg):  # a submitted SLURM job, or a node without rank 0: start() said what happened
        if rc != 0 and not multirun:
            sys.exit(rc)
        return
    print_summary(cfg, prepared, rc, wall_seconds=time.time() - started)
    if rc != 0 and not multirun:
        sys.exit(1)


def _remove_if_empty(run_dir: str) -> None:
    """A rejected config leaves no run dir behind (Hydra makes an empty one before the app runs)."""
    if os.path.isdir(run_dir) and not os.listdir(run_dir):
        os.rmdir(run_dir)


def _skip_mode_probe() -> None:
    """Hydra 1.3 composes the whole config once just to read `hydra.mode`, which trl_ds never sets in config; without
    that probe Hydra takes the mode from --multirun alone. One compose less: about 0.1 s of every dry run."""
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Hydra reads sys.argv itself; `argv`, when given, replaces the arguments after the program name."""
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    pause_collection()
    register()
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
