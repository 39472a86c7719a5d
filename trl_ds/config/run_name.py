"""The default run dir's name, one of its own for every command: `outputs/2026-12-04/13-41-18.123-7f3a`, the time to
the millisecond (names sort by start time) and a short random part. Resuming stays explicit: hydra.run.dir.
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
