"""One local data file read through as datasets' builders read it (json, csv, parquet): the number of records, or the
first problem that `datasets.load_dataset` or the trainer after it would fail on.

Accepted is what the ranks accept: UTF-8 with or without a BOM; JSON Lines or one JSON array of objects (or strings:
a "text" column), blank lines skipped; CSV as pandas reads it (NA and the like read as null); Parquet. A record must
hold its first record's column set, non-null, non-empty and of one JSON type. An empty JSON file is the caller's to
judge (an empty shard beside others loads); a CSV or Parquet file without rows is raised here.

Streaming, so memory stays flat: JSON Lines through pyarrow's streaming reader, re-read line by line only to name a
bad line; CSV through the csv module; a JSON array element by element; Parquet by its needed columns. No torch, no
datasets.
"""
import codecs
import csv
import json
import os
import re
from typing import Iterable, Iterator, Optional, Sequence, Tuple

JSON_TYPES = {str: "a string", list: "a list", dict: "an object", int: "a number", float: "a number",
              bool: "true/false"}
SPACE = re.compile(r"\s*")  # JSON's whitespace, around an array's elements and commas
# pandas' default missing-value words (pandas._libs.parsers.STR_NA_VALUES): a CSV field holding one is read as null
CSV_NULLS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                       "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
Record = Tuple[int, object]  # (line number, the decoded record)
ColumnSets = Sequence[Tuple[str, ...]]  # any one will do; () reads the records without judging their columns


class DataProblem(Exception):
    removable = False  # one file of several: removing it is a fix too


class BadRecord(DataProblem):
    fix = "Fix or remove that record"

    def __init__(self, line: Optional[int], why: str):
        super().__init__(why)
        self.line, self.why = line, why


class NotUtf8(BadRecord):
    fix = "Convert the file to UTF-8 (datasets reads UTF-8 only; e.g. iconv -f <its encoding> -t utf-8)"


class EmptyFile(DataProblem):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class WrongColumns(DataProblem):
    def __init__(self, columns: Sequence[str]):
        super().__init__(", ".join(columns))
        self.columns = list(columns)


def read_file(path: str, column_sets: ColumnSets) -> int:
    """The file's records, read through; raises the first DataProblem."""
    if path.endswith(".parquet"):
        return _parquet(path, column_sets)
    if path.endswith(".csv"):
        return check_records(_csv(path), column_sets, nulls=CSV_NULLS)
    rows = _json_lines_whole(path, column_sets)
    return rows if rows is not None else check_records(_json(path), column_sets)


def check_records(records: Iterable[Record], column_sets: ColumnSets, nulls=frozenset({""})) -> int:
    """Count the records; raise for the first one that is no object, or lacks the first record's column set."""
    columns, types, count = None, {}, 0
    example = f'{{"{column_sets[0][0]}": ...}}' if column_sets else "{...}"
    for line, record in records:
        if not isinstance(record, dict):
            raise BadRecord(line, f"is {JSON_TYPES.get(type(record), 'null')}, not a JSON object like {example}")
        if columns is None:  # the first record picks the column set
            columns = next((c for c in column_sets if set(c) <= set(record)), None if column_sets else ())
            if columns is None:
                raise WrongColumns(list(record))
            types = {c: type(record[c]) for c in columns}
        for c in columns:
            v = record.get(c)  # only a suspect value pays a call below
            if v is None or type(v) is not types[c] or (type(v) is str and v in nulls):
                _check_value(line, record, c, columns, types[c], nulls)
        count += 1
    return count


def _check_value(line: int, record: dict, c: str, columns: Tuple[str, ...], first_type: type, nulls) -> None:
    v = record.get(c)
    if v is None or (isinstance(v, str) and v in nulls):
        what = (f"no {c!r}" if c not in record else f"{c!r} null" if v is None else f"an empty {c!r}" if v == ""
                else f"{c!r} {v!r}, which pandas (datasets' CSV reader) reads as null")
        raise BadRecord(line, f"has {what}; every record needs {' and '.join(map(repr, columns))}, as the first "
                              f"one has")
    if type(v) is not first_type and JSON_TYPES.get(type(v)) != JSON_TYPES.get(first_type):
        raise BadRecord(line, f"has {c!r} as {JSON_TYPES.get(type(v), type(v).__name__)}, where the first record "
                              f"has {JSON_TYPES.get(first_type, first_type.__name__)}")


def _json_lines_whole(path: str, column_sets: ColumnSets) -> Optional[int]:
    """The records when pyarrow's streaming JSON reader (the parser datasets loads JSON Lines with) reads every one
    as UTF-8 and each holds one column set, non-null and non-empty: the common case, in C++ on every core. None sends
    the file to the line-by-line reader, which finds and names the bad line (or passes what arrow alone refused, a
    new column after the first block)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    with open(path, "rb") as f:
        if f.read(1 << 16).removeprefix(codecs.BOM_UTF8).lstrip()[:1] != b"{":
            return None  # a JSON array, or no record: the reader below
    columns, rows = None, 0
    try:
        for batch in pj.open_json(path, read_options=pj.ReadOptions(block_size=8 << 20)):
            batch.validate(full=True)  # arrow's JSON reader takes any bytes in a string; Python's decoding does not
            if columns is None:
                columns = next((c for c in column_sets if set(c) <= set(batch.schema.names)), None)
                if columns is None and column_sets:
                    return None
            for c in columns or ():
                if batch.column(c).null_count:
                    return None
                if pa.types.is_string(batch.column(c).type) and pc.any(pc.equal(batch.column(c), "")).as_py():
                    return None
            rows += batch.num_rows
    except (pa.ArrowInvalid, UnicodeDecodeError, StopIteration):
        return None
    return rows


def _json(path: str) -> Iterator[Record]:
    """JSON Lines, or one JSON array (datasets' json builder reads both, under .json or .jsonl)."""
    with open(path, "rb") as f:
        if f.read(1 << 16).removeprefix(codecs.BOM_UTF8).lstrip()[:1] == b"[":
            f.seek(0)
            yield from _json_array(_decode_whole(f.read()))
            return
    for line, text in utf8_lines(path):
        if text.strip():
            try:
                yield line, json.loads(text.rstrip("\r\n"))  # a cut-off string ends at the line's end
            except ValueError as err:
                raise BadRecord(line, f"is not JSON ({_reason(err)})") from None


def utf8_lines(path: str, newline: Optional[str] = None) -> Iterator[Tuple[int, str]]:
    """(line number, text), a leading BOM dropped; NotUtf8 names the first line that is not UTF-8."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as f:
            yield from enumerate(f, 1)
    except UnicodeDecodeError:
        raise _first_line_not_utf8(path) from None


def _first_line_not_utf8(path: str) -> NotUtf8:
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            raw = raw.removeprefix(codecs.BOM_UTF8) if line == 1 else raw
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return NotUtf8(line, _not_utf8(raw, err.start))
    return NotUtf8(None, "is not UTF-8")  # the file changed since the first read


def _decode_whole(data: bytes) -> str:
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        start = data.rfind(b"\n", 0, err.start) + 1
        raise NotUtf8(data.count(b"\n", 0, err.start) + 1, _not_utf8(data[start:], err.start - start)) from None


def _not_utf8(raw: bytes, at: int) -> str:
    column = len(raw[:at].decode("utf-8", "replace")) + 1
    return f"is not UTF-8 (byte 0x{raw[at]:02x} at column {column})"


def _json_array(text: str) -> Iterator[Record]:
    """Elements one at a time, separated by commas as json.loads requires (datasets refuses a missing or trailing
    comma too). An array whose first element is no object is one of strings to datasets: each becomes {"text": ...}."""
    decoder, pos = json.JSONDecoder(), SPACE.match(text, text.index("[") + 1).end()
    if text.startswith("]", pos):
        return
    wrap = not text.startswith("{", pos)
    while True:
        try:
            record, end = decoder.raw_decode(text, pos)
        except ValueError as err:
            raise BadRecord(text.count("\n", 0, getattr(err, "pos", pos)) + 1, f"is not JSON ({_reason(err)})") \
                from None
        yield text.count("\n", 0, pos) + 1, {"text": record} if wrap else record
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
    """Rows as dicts; too many fields, no header or no rows fail datasets' build."""
    reader = csv.reader(text for _, text in utf8_lines(path, newline=""))
    header = next((row for row in reader if row), None)  # pandas skips blank lines before the header too
    if not header:
        raise EmptyFile("0 bytes" if os.path.getsize(path) == 0 else "no header")
    rows = 0
    for row in reader:
        if not row:
            continue
        if len(row) > len(header):
            raise BadRecord(reader.line_num, f"has {len(row)} fields and the header {len(header)}")
        rows += 1
        yield reader.line_num, dict(zip(header, row))
    if not rows:
        raise EmptyFile("a header and no rows")


def _parquet(path: str, column_sets: ColumnSets) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if os.path.getsize(path) == 0:
        raise EmptyFile("0 bytes")
    try:
        file = pq.ParquetFile(path)
    except Exception as err:  # pyarrow's errors for a damaged file have no common base below Exception
        raise BadRecord(None, f"is not a Parquet file ({err})") from None
    if file.metadata.num_rows == 0:
        raise EmptyFile("0 rows")
    columns = next((c for c in column_sets if set(c) <= set(file.schema_arrow.names)), None if column_sets else ())
    if columns is None:
        raise WrongColumns(file.schema_arrow.names)
    offset = 0
    for batch in file.iter_batches(columns=list(columns)) if columns else ():
        for c in columns:
            nulls = pc.is_null(batch.column(c))
            if pc.any(nulls).as_py():
                raise BadRecord(offset + pc.index(nulls, True).as_py() + 1, f"has a null {c!r}")
        offset += batch.num_rows
    return file.metadata.num_rows
