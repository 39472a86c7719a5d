"""Rows far longer than trainer.max_length keeps, named before launch.

TRL tokenizes each row whole before cutting it to max_length, so a rank holds the whole row's text and tokens
first. A warning, not a refusal: the run trains right on the rows as cut. Measured in bytes per line (JSON Lines,
CSV) or per string value (Parquet); a JSON array file is left out.
"""
from typing import List, Optional, Tuple

from trl_ds.check.data_file import data_files, local_reads

# No tokenizer has tokens near 100 bytes on average: a longer row is mostly cut away.
BYTES_PER_TOKEN = 100


def long_row_warning(cfg) -> Optional[str]:
    """One line naming the longest row over BYTES_PER_TOKEN × trainer.max_length bytes, or None."""
    t = cfg.trainer
    limit = BYTES_PER_TOKEN * t.max_length
    for key, name, path, split in local_reads(cfg):
        for file in data_files(path, split):
            over = long_rows(file, limit)
            if over:
                size, where = max(over)
                more = f", and {len(over) - 1} more row(s) of this file are over {limit:,} bytes" if len(over) > 1 \
                    else ""
                return (f"{key}={name}: {file} {where} is {size:,} bytes{more}, far more than trainer.max_length="
                        f"{t.max_length} tokens keep ({BYTES_PER_TOKEN} × {t.max_length} = {limit:,} bytes); TRL "
                        f"tokenizes a row whole before cutting it, so a rank's memory grows with it. Split or "
                        f"shorten those rows, or raise trainer.max_length if the run should read them whole.")
    return None


def long_rows(path: str, limit: int) -> List[Tuple[int, str]]:
    """(bytes, 'line N' or 'row N') of every row of a data file over `limit` bytes."""
    if path.endswith(".parquet"):
        return _long_parquet_rows(path, limit)
    with open(path, "rb") as f:
        if not path.endswith(".csv") and f.read(1 << 16).lstrip()[:1] == b"[":
            return []  # a JSON array
        f.seek(0)
        sizes = ((len(line.rstrip(b"\r\n")), number) for number, line in enumerate(f, 1))
        return [(size, f"line {number}") for size, number in sizes if size > limit]


def _long_parquet_rows(path: str, limit: int) -> List[Tuple[int, str]]:
    """A row's bytes are those of its string values, read column by column in pyarrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found, first = [], 1
    for batch in pq.ParquetFile(path).iter_batches():
        total = pa.array([0] * batch.num_rows, pa.int64())
        for column in batch.columns:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                total = pc.add(total, pc.cast(pc.binary_length(column).fill_null(0), pa.int64()))
        over = pc.indices_nonzero(pc.greater(total, limit)).to_pylist()
        found += [(total[i].as_py(), f"row {first + i}") for i in over]
        first += batch.num_rows
    return found
