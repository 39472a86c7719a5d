"""The default run dir's name: one of its own for every command, however fast commands follow each other.

`outputs/2026-12-04/13-41-18.123-7f3a`: date, time to the millisecond (names sort by start time), then a short
random part, so two commands started in the same millisecond (a loop over configs, two terminals) still get two run
dirs. Resuming stays explicit: name the run dir with hydra.run.dir.
"""
import secrets
from datetime import datetime

from omegaconf import OmegaConf

RESOLVER = "trl_ds_run_name"
_given = set()  # one process asking twice in a millisecond: 4 hex digits clash there 1 time in 65536 per pair


def run_name() -> str:
    while True:
        now = datetime.now()
        name = f"{now:%Y-%m-%d}/{now:%H-%M-%S}.{now.microsecond // 1000:03d}-{secrets.token_hex(2)}"
        if name not in _given:
            _given.add(name)
            return name


def register_run_name() -> None:
    """Cached: every read of hydra.run.dir in this process gives the same folder."""
    OmegaConf.register_new_resolver(RESOLVER, run_name, use_cache=True, replace=True)
