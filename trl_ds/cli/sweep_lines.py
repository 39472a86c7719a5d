"""A sweep's own progress (`python -m trl_ds -m ...`): one line as each point starts and ends, the report command
at the end. A Hydra callback (conf/config.yaml `hydra.callbacks`), so it sees every point whatever the launcher."""
import glob
import os
import sys
import time
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode

MiB = 2 ** 20


def sweep_size(sweep_overrides) -> int:
    """Points in the sweep: the product of every swept override's values, as Hydra's basic sweeper makes them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    size = 1
    for override in OverridesParser.create().parse_overrides(list(sweep_overrides)):
        if override.is_sweep_override():
            size *= len(list(override.sweep_string_iterator()))
    return size


def point_line(run_dir: str) -> str:
    """status, final loss, peak memory and time of a finished point, from its summary.json and memory files."""
    from trl_ds.rundir.layout import MEMORY_DIR, SUMMARY, read_json

    try:
        s = read_json(os.path.join(run_dir, SUMMARY))
    except (OSError, ValueError):
        return "ended without a summary.json"
    parts = [s.get("status", "?")]
    if s.get("status") in ("skipped", "failed", "stopped"):
        parts.append(s.get("reason", "")[:200])
    if s.get("final_loss") is not None:
        parts.append(f"final loss {s['final_loss']:.4f}")
    peaks = []
    for path in glob.glob(os.path.join(glob.escape(run_dir), MEMORY_DIR, "rank_*.json")):  # a literal run dir
        m = read_json(path)
        peaks.append(m.get("gpu_peak_allocated_bytes", m["peak_rss_bytes"]))
    if peaks:
        parts.append(f"peak {max(peaks) / MiB:.0f} MiB/rank")
    return ", ".join(parts)


class SweepLines(Callback):
    def __init__(self) -> None:
        self.total = None
        self.started = None

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        self.total = sweep_size(config.hydra.overrides.task)

    def on_job_start(self, config, **kwargs: Any) -> None:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return
        self.started = time.time()
        print(f"trl_ds sweep [{self._index(config)}] {self._overrides(config)}: started", file=sys.stderr,
              flush=True)

    def on_job_end(self, config, job_return, **kwargs: Any) -> None:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return
        took = time.time() - (self.started or time.time())
        line = point_line(config.hydra.runtime.output_dir)
        print(f"trl_ds sweep [{self._index(config)}] {self._overrides(config)}: {line}, {took:.0f} s",
              file=sys.stderr, flush=True)

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        sweep_dir = os.path.abspath(config.hydra.sweep.dir)
        print(f"trl_ds sweep: done ({self.total} points) in {sweep_dir}; report: trl-ds report "
              f"{sweep_dir} (writes {os.path.join(sweep_dir, 'sweep.md')})", file=sys.stderr, flush=True)

    def _index(self, config) -> str:
        return f"{config.hydra.job.num + 1}/{self.total or '?'}"

    @staticmethod
    def _overrides(config) -> str:
        return " ".join(config.hydra.overrides.task) or "(no overrides)"
