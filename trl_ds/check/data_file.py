"""A local data file (or a folder of them), read through before launch: every record parses and holds the columns the
trainer needs, so a bad record is named by file and line here instead of in a rank's traceback from `datasets`.

What counts as bad is what breaks `datasets.load_dataset` or the trainer after it: a line that is not JSON or not a
JSON object, a CSV row with more fields than the header, a needed column missing, null or empty (datasets fills it
with None and TRL fails on it), or of another JSON type than in the first record (a string here, a list there). The
column set a file must hold is the one its first record holds (trl_ds/check/trainer_rules.py names a first record
that holds none). Blank lines are skipped, as datasets skips them.

Streaming, so memory stays flat on any size: JSON Lines go first through pyarrow's streaming JSON reader (datasets'
own parser, in C++ on every core), and only a file it refuses or finds a hole in is read again line by line to name
the line; CSV streams through the csv module; a JSON array is decoded element by element from the text; Parquet is
read by its needed columns only. No torch, no datasets: both cost seconds to import.
"""
import csv
import json
import os
import re
from typing import Iterator, List, Optional, Sequence, Tuple

from trl_ds.check.trainer_rules import NEEDED_COLUMNS
from trl_ds.config.data_files import split_files
from trl_ds.config.values import LOCAL_DATA_SUFFIXES, is_local_path, value

JSON_TYPES = {str: "a string", list: "a list", dict: "an object", int: "a number", float: "a number",
              bool: "true/false"}
SPACE = re.compile(r"\s*")  # JSON's whitespace, around an array's elements and commas
Record = Tuple[int, object]  # (line number, the decoded record)


class BadRecord(Exception):
    def __init__(self, line: Optional[int], why: str):
        super().__init__(why)
        self.line, self.why = line, why


def check_data_files(cfg) -> List[str]:
    """The train data and, when evaluating, the evaluation data: the first bad record of each, one line each."""
    t, trainer = cfg.trainer, value(cfg.trainer.name)
    names = [("trainer.dataset_name", t.dataset_name, t.dataset_train_split)]
    if value(t.eval_strategy) != "no":  # the worker's evaluation data (rundir/trainer_config.py eval_dataset_path)
        names.append(("trainer.eval_dataset_name", t.eval_dataset_name, t.dataset_test_split) if t.eval_dataset_name
                     else ("trainer.dataset_name", t.dataset_name, t.dataset_test_split))
    problems, read = [], set()
    for key, name, split in names:
        if name == "tiny" or not is_local_path(name) or not os.path.exists(os.path.expanduser(name)):
            continue  # the built-in data, a hub name, or a missing path (named by check_local_files)
        files = tuple(data_files(os.path.expanduser(name), split))
        if files in read:  # one file for both splits: read once
            continue
        read.add(files)
        problem = first_bad_record(os.path.expanduser(name), NEEDED_COLUMNS[trainer], split)
        if problem:
            problems.append(f"{key}={name}: {problem}. Fix or remove that record, or give another {key}.")
    return problems


def data_files(path: str, split: str) -> List[str]:
    """The files the worker loads for `split` (config/data_files.py). Where it leaves a folder to datasets, every
    data file in it and below (datasets builds all splits of a folder, so a broken test.jsonl fails the train split's
    load too); hidden names skipped, as datasets skips them."""
    files = split_files(path, split)
    if files or not os.path.isdir(path):
        return files
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.join(root, f) for f in sorted(files)
                  if f.endswith(LOCAL_DATA_SUFFIXES) and not f.startswith((".", "_"))]
    return found


def first_bad_record(path: str, column_sets: Sequence[Tuple[str, ...]], split: str = "train") -> Optional[str]:
    """'line N <why>' (in a folder: '<file> line N <why>') for the first bad record of the split's data files; None
    when all are good."""
    for file in data_files(path, split):
        name = f"{file} " if file != path else ""
        try:
            bad_record(file, column_sets)
        except BadRecord as bad:
            where = f"{'row' if file.endswith('.parquet') else 'line'} {bad.line} " if bad.line else ""
            return f"{name}{where}{bad.why}"
        except (OSError, UnicodeDecodeError) as err:
            return f"{name}cannot be read ({err})"
    return None


def bad_record(path: str, column_sets: Sequence[Tuple[str, ...]]) -> None:
    """Raise BadRecord for the first record that datasets or the trainer would fail on."""
    if path.endswith(".parquet"):
        return _parquet(path, column_sets)
    if not path.endswith(".csv") and _json_lines_whole(path, column_sets):
        return
    records = _csv(path) if path.endswith(".csv") else _json(path)
    columns = types = None
    for line, record in records:
        if not isinstance(record, dict):
            raise BadRecord(line, f"is {JSON_TYPES.get(type(record), 'null')}, not a JSON object like "
                                  f'{{"{column_sets[0][0]}": ...}}')
        if columns is None:  # the first record picks the column set; trainer_rules names one that holds none
            columns = next((c for c in column_sets if set(c) <= set(record)), None)
            if columns is None:
                return
            types = {c: type(record[c]) for c in columns}
        for c in columns:
            v = record.get(c)
            if v is None or v == "":
                what = f"no {c!r}" if c not in record else f"{c!r} null" if v is None else f"an empty {c!r}"
                raise BadRecord(line, f"has {what}; every record needs {' and '.join(map(repr, columns))}, as the "
                                      f"first one has")
            if type(v) is not types[c] and JSON_TYPES.get(type(v)) != JSON_TYPES.get(types[c]):
                raise BadRecord(line, f"has {c!r} as {JSON_TYPES.get(type(v), type(v).__name__)}, where the first "
                                      f"record has {JSON_TYPES.get(types[c], types[c].__name__)}")


def _json_lines_whole(path: str, column_sets: Sequence[Tuple[str, ...]]) -> bool:
    """True when pyarrow's streaming JSON reader (the parser datasets loads JSON Lines with) reads every record and
    each holds one column set, non-null and non-empty: the common case, in C++ on every core. False sends the file
    to the line-by-line reader below, which finds and names the bad line (or passes what arrow alone refused, a new
    column after the first block)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    with open(path, "rb") as f:
        if f.read(1 << 16).lstrip()[:1] != b"{":
            return False  # a JSON array, or an empty file: the reader below
    columns = None
    try:
        for batch in pj.open_json(path, read_options=pj.ReadOptions(block_size=8 << 20)):
            columns = columns or next((c for c in column_sets if set(c) <= set(batch.schema.names)), ())
            for c in columns or ["no column set"]:
                if c not in batch.schema.names or batch.column(c).null_count:
                    return False
                if pa.types.is_string(batch.column(c).type) and pc.any(pc.equal(batch.column(c), "")).as_py():
                    return False
    except (pa.ArrowInvalid, StopIteration):
        return False
    return True


def _json(path: str) -> Iterator[Record]:
    """JSON Lines, or one JSON array of objects (datasets' json builder reads both, under .json or .jsonl)."""
    with open(path, encoding="utf-8") as f:
        first = f.read(1 << 16).lstrip()[:1]
        f.seek(0)
        if first == "[":
            yield from _json_array(f.read())
            return
        for line, text in enumerate(f, 1):
            if text.strip():
                try:
                    yield line, json.loads(text.rstrip("\r\n"))  # a cut-off string ends at the line's end
                except ValueError as err:
                    raise BadRecord(line, f"is not JSON ({_reason(err)})") from None


def _json_array(text: str) -> Iterator[Record]:
    """Elements one at a time, separated by commas as json.loads requires (datasets refuses a missing or trailing
    comma too)."""
    decoder, pos = json.JSONDecoder(), SPACE.match(text, text.index("[") + 1).end()
    if text.startswith("]", pos):
        return
    while True:
        try:
            record, end = decoder.raw_decode(text, pos)
        except ValueError as err:
            raise BadRecord(text.count("\n", 0, getattr(err, "pos", pos)) + 1, f"is not JSON ({_reason(err)})") \
                from None
        yield text.count("\n", 0, pos) + 1, record
        pos = SPACE.match(text, end).end()
        if text.startswith("]", pos):
            return
        if not text.startswith(",", pos):
            err = json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            raise BadRecord(err.lineno, f"is not JSON ({_reason(err)})")
        pos = SPACE.match(text, pos + 1).end()


def _reason(err: ValueError) -> str:
    """json's own words and the column, without its 'line 1 column 12 (char 11)' tail (the line is ours)."""
    if not isinstance(err, json.JSONDecodeError):
        return str(err)
    return f"{err.msg.removesuffix(' at')} at column {err.colno}"  # "Invalid control character at" has its own "at"


def _csv(path: str) -> Iterator[Record]:
    """Rows as dicts; a row with more fields than the header is what pandas (datasets' csv reader) refuses."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            return
        for row in reader:
            if not row:
                continue
            if len(row) > len(header):
                raise BadRecord(reader.line_num, f"has {len(row)} fields and the header {len(header)}")
            yield reader.line_num, dict(zip(header, row))


def _parquet(path: str, column_sets: Sequence[Tuple[str, ...]]) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(path)
    except Exception as err:  # pyarrow's errors for a damaged file have no common base below Exception
        raise BadRecord(None, f"is not a Parquet file ({err})") from None
    columns = next((c for c in column_sets if set(c) <= set(file.schema_arrow.names)), None)
    if columns is None:
        return
    offset = 0
    for batch in file.iter_batches(columns=list(columns)):
        for c in columns:
            nulls = pc.is_null(batch.column(c))
            if pc.any(nulls).as_py():
                raise BadRecord(offset + pc.index(nulls, True).as_py() + 1, f"has a null {c!r}")
        offset += batch.num_rows
