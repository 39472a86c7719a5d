"""The column names of a local dataset file, read from its first record only (cheap on any file size)."""
import csv
import json
import os
from typing import List, Optional

PEEK_BYTES = 1 << 20  # a JSON array's first record must start within this much of the file


def first_record_columns(path: str) -> Optional[List[str]]:
    """Columns of a local .jsonl/.json/.csv/.parquet file; None when the format or layout is not one we can peek."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        return None
    try:
        if path.endswith((".jsonl", ".json")):
            return _json_columns(path)
        if path.endswith(".csv"):
            with open(path, newline="") as f:
                return next(csv.reader(f), [])
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # unreadable here: the loader will say why
    return None


def _json_columns(path: str) -> Optional[List[str]]:
    """JSON Lines (one object per line) or a JSON array of objects, as datasets' json builder reads them."""
    with open(path) as f:
        head = f.read(PEEK_BYTES)
    text = head.lstrip()
    if text.startswith("["):
        record, _ = json.JSONDecoder().raw_decode(text[1:].lstrip())
    else:
        record = json.loads(text.splitlines()[0]) if text else {}
    return list(record) if isinstance(record, dict) else None
