"""Live progress of a run, read from its own files (metrics.jsonl, each rank's progress/rank_K.json) on any host that
sees the run dir: the launching terminal, `trl-ds watch` and a SLURM job's .out file all show the same thing."""
import glob
import json
import os
import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO

from trl_ds.op_locks import WAITING_GLOB
from trl_ds.rundir.layout import METRICS, PROGRESS_DIR, RESOLVED_CONFIG
from trl_ds.rundir.metrics import SUPERSEDED, parse_line

LIVE_MEMORY_GLOB = os.path.join(PROGRESS_DIR, "rank_*.json")
MiB = 2 ** 20


class MetricsTail:
    """Reads the rows appended to metrics.jsonl since the last call; a half-written last line waits for its end, a cut
    or superseded row is skipped. When a resumed launch rewrites the file (a new inode), reading starts again from its
    top, past the rows older than the newest seen: earlier launches' rows."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.inode = None
        self.newest: Optional[float] = None  # the time of the newest row returned or skipped

    def skip_existing(self) -> None:
        """Start after the rows already there (a resumed run's earlier launches)."""
        self.newest = time.time()
        try:
            stat = os.stat(self.path)
            self.offset, self.inode = stat.st_size, stat.st_ino
        except OSError:
            self.offset = 0

    def read(self) -> List[dict]:
        try:
            with open(self.path, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                rewritten = self.inode is not None and inode != self.inode
                if rewritten:
                    self.offset = 0
                self.inode = inode
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        rows = (parse_line(line.decode(errors="replace")) for line in complete.splitlines() if line.strip())
        rows = [row for row in rows if row is not None and not row.get(SUPERSEDED) and isinstance(row.get("step"), int)]
        if rewritten and self.newest is not None:
            rows = [row for row in rows if not _number(row.get("time")) or row["time"] > self.newest]
        times = [row["time"] for row in rows if _number(row.get("time"))]
        self.newest = max(times + ([self.newest] if self.newest is not None else []), default=None)
        return rows


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class Progress:
    """What is known of a run so far. `add` takes new metrics rows; the properties derive the rest."""
    total_steps: Optional[int]
    started: float = field(default_factory=time.time)
    step: int = 0
    loss: Optional[float] = None
    eval_loss: Optional[float] = None
    learning_rate: Optional[float] = None
    samples_per_second: Optional[float] = None
    epoch: Optional[float] = None
    peaks: Dict[int, int] = field(default_factory=dict)  # rank -> peak bytes (GPU allocated, else RSS)
    # (time, step, tokens) of the latest training rows: rates and time left follow the recent pace
    _window: deque = field(default_factory=lambda: deque(maxlen=50))

    def add(self, rows: List[dict]) -> None:
        for row in rows:
            if "eval_loss" in row:
                self.eval_loss = row["eval_loss"]
            if "loss" not in row or not isinstance(row.get("time"), (int, float)):  # eval and summary rows
                continue
            self.step = row["step"]
            self.loss, self.learning_rate = row["loss"], row.get("learning_rate")
            self.samples_per_second, self.epoch = row.get("samples_per_second"), row.get("epoch")
            self._window.append((row["time"], row["step"], row.get("num_tokens")))

    @property
    def tokens_per_second(self) -> Optional[float]:
        if len(self._window) < 2:
            return None
        (t0, _, n0), (t1, _, n1) = self._window[0], self._window[-1]
        return (n1 - n0) / (t1 - t0) if None not in (n0, n1) and t1 > t0 else None

    @property
    def seconds_left(self) -> Optional[float]:
        if not self.total_steps or len(self._window) < 2:
            return None
        (t0, s0, _), (t1, s1, _) = self._window[0], self._window[-1]
        return max(self.total_steps - self.step, 0) * (t1 - t0) / (s1 - s0) if s1 > s0 else None

    def line(self, now: Optional[float] = None) -> str:
        """One line: step, loss, lr, throughput, time, peak memory per rank."""
        now = time.time() if now is None else now
        parts = [f"step {self.step}/{self.total_steps}" if self.total_steps else f"step {self.step}"]
        if self.epoch is not None:
            parts.append(f"epoch {self.epoch:.2f}")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.eval_loss is not None:
            parts.append(f"eval loss {self.eval_loss:.4f}")
        if self.learning_rate is not None:
            parts.append(f"lr {self.learning_rate:.2e}")
        if self.samples_per_second:
            parts.append(f"{self.samples_per_second:.1f} samples/s")
        if self.tokens_per_second:
            parts.append(f"{self.tokens_per_second:.0f} tokens/s")
        left = self.seconds_left
        parts.append(f"{clock(now - self.started)} elapsed" + (f", {clock(left)} left" if left is not None else ""))
        if self.peaks:
            parts.append("peak " + " ".join(f"r{r} {b / MiB:.0f} MiB" for r, b in sorted(self.peaks.items())))
        return " | ".join(parts)


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def read_peaks(run_dir: str) -> Dict[int, int]:
    peaks = {}
    for path in glob.glob(os.path.join(glob.escape(run_dir), LIVE_MEMORY_GLOB)):
        try:
            with open(path) as f:
                m = json.load(f)
        except (OSError, ValueError):  # being replaced right now: the next poll reads it
            continue
        if isinstance(m, dict) and "rank" in m and "peak_rss_bytes" in m:
            peaks[m["rank"]] = m.get("gpu_peak_allocated_bytes", m["peak_rss_bytes"])
    return peaks


def total_steps(run_dir: str) -> Optional[int]:
    """trainer.max_steps from the run's resolved config (None when the run is bounded by epochs)."""
    try:
        with open(os.path.join(run_dir, RESOLVED_CONFIG)) as f:
            match = re.search(r"^  max_steps: (-?\d+)$", f.read(), re.MULTILINE)
    except OSError:
        return None
    steps = int(match.group(1)) if match else -1
    return steps if steps > 0 else None


class Display:
    """On a terminal, one status line redrawn in place; elsewhere one plain line at the first step, then every
    `every_s` seconds, and a last one at the end when the run went on after the last line."""

    def __init__(self, progress: Progress, stream: TextIO, every_s: float, prefix: str = "trl_ds: "):
        self.progress, self.stream, self.every_s, self.prefix = progress, stream, every_s, prefix
        self.live = stream.isatty()
        self.drawn = None  # what the line on screen shows (terminal)
        self.last_line = None  # (time, what it showed) of the last plain line

    def shown(self) -> tuple:
        """What a line reports that may change: the step, and the evaluation, which transformers logs after the
        step's training row (one poll can see the step before its evaluation)."""
        return self.progress.step, self.progress.eval_loss

    def update(self, now: Optional[float] = None) -> None:
        now = time.time() if now is None else now
        if self.progress.step == 0:
            return
        if self.live:
            if self.shown() != self.drawn:
                self.stream.write("\r\x1b[K" + self.prefix + self.progress.line(now))  # \x1b[K: clear the old rest
                self.stream.flush()
                self.drawn = self.shown()
            return
        if self.last_line is None or (now - self.last_line[0] >= self.every_s and self.shown() != self.last_line[1]):
            self._plain(now)

    def note(self, line: str) -> None:
        """A line of its own, below the live line when one is drawn."""
        self.stream.write(("\n" if self.live and self.drawn is not None else "") + line + "\n")
        self.stream.flush()
        self.drawn = None

    def _plain(self, now: float) -> None:
        self.stream.write(self.prefix + self.progress.line(now) + "\n")
        self.stream.flush()
        self.last_line = (now, self.shown())

    def close(self) -> None:
        if self.live and self.drawn is not None:
            self.stream.write("\n")
            self.stream.flush()
        elif not self.live and self.last_line is not None and self.shown() != self.last_line[1]:
            self._plain(time.time())


class RunProgress:
    """Node 0's view: the run's progress from its files, polled by the launcher's watch loop."""

    def __init__(self, run_dir: str, every_s: float, stream: TextIO = sys.stderr, started: Optional[float] = None,
                 from_start: bool = False):
        self.run_dir = run_dir
        self.tail = MetricsTail(os.path.join(run_dir, METRICS))
        if not from_start:
            self.tail.skip_existing()
        self.progress = Progress(total_steps(run_dir), started=started or time.time())
        self.display = Display(self.progress, stream, every_s)
        self.waits: Dict[str, str] = {}  # rank -> the wait last shown
        for path in self._wait_files():  # a killed launch's; made before this launch's ranks start
            os.remove(path)

    def _wait_files(self) -> List[str]:
        return sorted(glob.glob(os.path.join(glob.escape(self.run_dir), PROGRESS_DIR, WAITING_GLOB)))

    def poll(self) -> None:
        self.progress.add(self.tail.read())
        self.progress.peaks = read_peaks(self.run_dir) or self.progress.peaks
        self.display.update()
        self.show_waits()

    def show_waits(self) -> None:
        """A rank waiting on another process's op lock (trl_ds/op_locks.py writes it after 5 s): once per wait."""
        for path in self._wait_files():
            try:
                with open(path) as f:
                    line = f.read().strip()
            except OSError:
                continue
            rank = os.path.basename(path)[len("waiting_rank_"):-len(".txt")]
            if line and self.waits.get(rank) != line:
                self.waits[rank] = line
                self.display.note(line.replace("trl_ds: ", f"trl_ds: rank {rank}: ", 1))

    def close(self) -> None:
        self.poll()
        self.display.close()


class NodeProgress:
    """Another node's view (its run dir may not be shared): its own ranks' state, one line every `every_s`."""

    def __init__(self, node_rank: int, joined_file: str, every_s: float, stream: TextIO = sys.stderr):
        self.node_rank, self.joined_file, self.every_s, self.stream = node_rank, joined_file, every_s, stream
        self.started = time.time()
        self.last = self.started

    def poll(self) -> None:
        now = time.time()
        if now - self.last < self.every_s:
            return
        self.last = now
        state = "ranks training" if os.path.exists(self.joined_file) else "waiting for every rank to join"
        self.stream.write(f"trl_ds: node {self.node_rank}: {state}, {clock(now - self.started)} elapsed\n")
        self.stream.flush()

    def close(self) -> None:
        pass
