"""metrics.jsonl: one JSON row per logging step (rank 0 appends), readable whatever a kill did to it.

The next launch repairs a cut last line before appending. A resumed launch redoes the steps after its checkpoint:
the killed launch's rows of those steps are marked `"superseded": true` and every reader skips them, so each step
has one row.
"""
import json
import os
from typing import List, Optional, Tuple

SUPERSEDED = "superseded"
ROW_START = '{"step"'  # every row begins with its step (worker/train.py MetricsLogger)


def parse_line(line: str) -> Optional[dict]:
    """A row, or None for a cut line; a row appended onto a cut line is recovered."""
    return _parse(line)[0]


def _parse(line: str) -> Tuple[Optional[dict], bool]:
    """(the row or None, whether the line was that row alone)."""
    line = line.strip()
    for start in _starts(line):
        try:
            row = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(row, dict):
            return row, start == 0
    return None, not line


def _starts(line: str):
    yield 0
    at = line.find(ROW_START, 1)
    while at > 0:
        yield at
        at = line.find(ROW_START, at + 1)


def read_rows(path: str, with_superseded: bool = False) -> List[dict]:
    """Every parseable row (cut lines skipped), superseded ones only when asked; [] without the file."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    rows = [row for row in map(parse_line, lines) if row is not None]
    return rows if with_superseded else [row for row in rows if not row.get(SUPERSEDED)]


def prepare_for_resume(path: str, resumed_step: int) -> Tuple[int, int]:
    """Before a launch appends: drop cut lines, mark rows after `resumed_step` superseded; written atomically.
    Returns (cut lines dropped, rows marked); (0, 0) and no write when nothing needed doing."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return 0, 0
    parsed = [_parse(line) for line in text.splitlines()]
    cut = sum(1 for row, alone in parsed if row is None and not alone)
    glued = sum(1 for row, alone in parsed if row is not None and not alone)
    rows = [row for row, _ in parsed]
    kept = [row for row in rows if row is not None]
    marked = 0
    for row in kept:
        if isinstance(row.get("step"), int) and row["step"] > resumed_step and not row.get(SUPERSEDED):
            row[SUPERSEDED] = True
            marked += 1
    if not (cut or marked or glued or (text and not text.endswith("\n"))):
        return 0, 0
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in kept)
    os.replace(tmp, path)
    return cut, marked


def mean_loss(rows: List[dict]) -> Optional[float]:
    """The mean training loss over every step logged in the run (one row per step at logging_steps=1)."""
    losses = [row["loss"] for row in rows if isinstance(row.get("loss"), (int, float))]
    return sum(losses) / len(losses) if losses else None
