"""One data file read as datasets reads it: what the worker's loader (trl_ds.worker.data.load_split, the ranks' own
call) fails on is refused, naming the line, and what it loads is accepted. Each case loads the same file with the
worker's loader, so the expected verdict comes from datasets, not from the check."""
import pytest

from trl_ds.check.data_readers import CSV_NULLS, EmptyFile, NotUtf8, WrongColumns, read_file
from trl_ds.check.trainer_rules import NEEDED_COLUMNS

SFT = NEEDED_COLUMNS["sft"]
GOOD = "".join(f'{{"text": "question : what is {n} plus one ?"}}\n' for n in ("one", "two", "three", "four"))
BOM = b"\xef\xbb\xbf"


@pytest.fixture
def rank_rows(tmp_path, monkeypatch):
    """rank_rows(path) -> every 'text' value as a rank reads it, through the worker's loader."""
    import datasets

    from trl_ds.worker.data import load_split

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    return lambda path: list(load_split(str(path), "train")["text"])


@pytest.mark.parametrize("name, data, line, column", [
    # "café" in Latin-1: byte 0xe9 where UTF-8 needs a lead byte; the columns are counted by hand
    ("rows.jsonl", GOOD.encode().replace(b"three", b"caf\xe9", 1), 3, 33),
    ("rows.json", b'[\n  {"text": "a"},\n  {"text": "caf\xe9"}\n]\n', 3, 16),
    ("rows.csv", b"text\na\ncaf\xe9\n", 3, 4),
])
def test_bytes_that_are_not_utf8_are_named_by_line(tmp_path, rank_rows, name, data, line, column):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(NotUtf8) as refused:
        read_file(str(path), SFT)
    assert (refused.value.line, refused.value.why) == (line, f"is not UTF-8 (byte 0xe9 at column {column})")
    with pytest.raises(Exception) as failed:  # .jsonl: arrow loads the bytes, Python's decoding of the row fails
        rank_rows(path)
    assert "utf-8" in f"{failed.value} {failed.value.__cause__}".lower(), failed.value


@pytest.mark.parametrize("name, data", [
    ("rows.jsonl", BOM + GOOD.encode()),
    ("rows.json", BOM + b'[{"text": "a"},\n {"text": "b"}]'),
    ("rows.csv", BOM + b"text\na\nb\n"),
])
def test_a_leading_bom_is_dropped_as_datasets_drops_it(tmp_path, rank_rows, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    assert read_file(str(path), SFT) == len(rank_rows(path))
    assert rank_rows(path)[0] in ("a", "question : what is one plus one ?")  # the column is "text", not "\ufefftext"


@pytest.mark.parametrize("data, why, failure", [
    (b"", "0 bytes", "An error occurred while generating the dataset"),  # pandas: No columns to parse from file
    (b"text\n", "a header and no rows", "corresponds to no data"),
    (b"\n\n", "no header", "An error occurred while generating the dataset"),
])
def test_a_csv_without_rows_is_empty(tmp_path, rank_rows, data, why, failure):
    from datasets.exceptions import DatasetGenerationError

    path = tmp_path / "rows.csv"
    path.write_bytes(data)
    with pytest.raises(EmptyFile, match=f"^{why}$"):
        read_file(str(path), SFT)
    with pytest.raises((DatasetGenerationError, ValueError), match=failure):
        rank_rows(path)


def test_a_parquet_file_without_rows_is_empty(tmp_path, rank_rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), path)
    with pytest.raises(EmptyFile, match="^0 rows$"):
        read_file(str(path), SFT)
    with pytest.raises(Exception, match="An error occurred while generating the dataset"):
        rank_rows(path)  # arrow: "BatchSize must be greater than 0, got 0"
    path.write_bytes(b"")
    with pytest.raises(EmptyFile, match="^0 bytes$"):
        read_file(str(path), SFT)


@pytest.mark.parametrize("name, data, error", [
    ("rows.jsonl", b"", StopIteration),  # the json builder's schema probe finds no table
    ("rows.jsonl", b"\n  \n", ValueError),  # Instruction "train" corresponds to no data!
    ("rows.json", b"[]\n", ValueError),
])
def test_json_without_records_counts_0(tmp_path, rank_rows, name, data, error):
    """0 records is the caller's to judge (an empty shard beside others loads); alone, datasets has no data."""
    path = tmp_path / name
    path.write_bytes(data)
    assert read_file(str(path), SFT) == 0
    with pytest.raises(error):
        rank_rows(path)


def test_csv_missing_value_words_are_null_as_pandas_reads_them(tmp_path, rank_rows):
    from pandas._libs.parsers import STR_NA_VALUES

    assert CSV_NULLS == STR_NA_VALUES
    path = tmp_path / "rows.csv"
    path.write_text('text,label\n"a\nb",1\nNA,2\n')
    assert rank_rows(path) == ["a\nb", None]
    with pytest.raises(Exception) as refused:
        read_file(str(path), SFT)
    assert (refused.value.line, refused.value.why) == (4, "has 'text' 'NA', which pandas (datasets' CSV reader) "
                                                          "reads as null; every record needs 'text', as the first "
                                                          "one has")


def test_a_json_array_of_strings_is_a_text_column(tmp_path, rank_rows):
    path = tmp_path / "rows.json"
    path.write_text('["a", "b", "c"]')
    assert rank_rows(path) == ["a", "b", "c"]
    assert read_file(str(path), SFT) == 3


def test_a_first_record_without_the_trainers_columns_names_them(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(WrongColumns) as refused:
        read_file(str(path), SFT)
    assert refused.value.columns == ["question", "answer"]
    assert read_file(str(path), ()) == 1  # a file of another split: read through, its columns not judged
