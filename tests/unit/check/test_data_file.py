"""A local data file is read through before launch: the first bad record is named by file and line (the line numbers
below are where these tests wrote the bad record), and what is named bad is what `datasets` or the trainer fails on."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from trl_ds.check.data_file import data_files, first_bad_record
from trl_ds.check.trainer_rules import NEEDED_COLUMNS

REPO = Path(__file__).resolve().parents[3]
SFT, DPO = NEEDED_COLUMNS["sft"], NEEDED_COLUMNS["dpo"]
GOOD = [{"text": f"question : what is {n} plus one ?"} for n in ("one", "two", "three", "four")]
GOOD_BYTES = "".join(json.dumps(r) + "\n" for r in GOOD).encode()


def jsonl(path, rows, broken_at=None, broken='{"text": "cut off\n'):
    """rows as JSON Lines; with broken_at, that (1-based) line is replaced by `broken`."""
    lines = [json.dumps(r) + "\n" for r in rows]
    if broken_at:
        lines[broken_at - 1] = broken
    path.write_text("".join(lines))
    return str(path)


def load_with_datasets(path: str):
    from datasets import load_dataset

    builder = {".csv": "csv", ".parquet": "parquet"}.get(os.path.splitext(path)[1], "json")
    return load_dataset(builder, data_files={"train": path}, split="train", cache_dir=str(Path(path).parent / "c"))


def test_a_good_file_passes_and_datasets_loads_it(tmp_path):
    path = jsonl(tmp_path / "rows.jsonl", GOOD)
    with open(path, "a") as f:
        f.write("\n   \n")  # blank lines: datasets skips them, so they are not errors
    assert first_bad_record(path, SFT) is None
    assert load_with_datasets(path)["text"] == [r["text"] for r in GOOD]


def test_a_line_that_is_not_json_is_named_and_datasets_fails_on_it(tmp_path):
    path = jsonl(tmp_path / "rows.jsonl", GOOD, broken_at=3)
    assert first_bad_record(path, SFT) == "line 3 is not JSON (Unterminated string starting at column 10)"
    with pytest.raises(Exception, match="An error occurred while generating the dataset"):
        load_with_datasets(path)


@pytest.mark.parametrize("record, why", [
    ({"other": "x"}, "has no 'text'; every record needs 'text', as the first one has"),
    ({"text": None}, "has 'text' null; every record needs 'text', as the first one has"),
    ({"text": ""}, "has an empty 'text'; every record needs 'text', as the first one has"),
    ({"text": 5}, "has 'text' as a number, where the first record has a string"),
    ([1, 2], 'is a list, not a JSON object like {"text": ...}'),
])
def test_a_record_the_trainer_cannot_use_is_named(tmp_path, record, why):
    path = jsonl(tmp_path / "rows.jsonl", GOOD[:3] + [record] + GOOD[3:])
    assert first_bad_record(path, SFT) == f"line 4 {why}"


def test_the_first_records_column_set_holds_for_every_record(tmp_path):
    rows = [{"prompt": "p", "chosen": "a", "rejected": "b"}] * 2 + [{"prompt": "p", "chosen": "a"}]
    assert first_bad_record(jsonl(tmp_path / "pairs.jsonl", rows), DPO) == (
        "line 3 has no 'rejected'; every record needs 'chosen' and 'rejected', as the first one has")
    # a first record with none of the trainer's column sets is trainer_rules' message (first record), not this one
    assert first_bad_record(jsonl(tmp_path / "other.jsonl", [{"x": 1}, "not an object"]), SFT) is None


def test_a_json_array_names_the_line_of_the_bad_element(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[\n  {"text": "a"},\n  {"text": "b"},\n  {"text": null}\n]\n')
    assert first_bad_record(str(path), SFT) == "line 4 has 'text' null; every record needs 'text', as the first one has"
    path.write_text('[\n  {"text": "a"},\n  {"text": "b",}\n]\n')
    assert first_bad_record(str(path), SFT).startswith("line 3 is not JSON (Expecting property name")


@pytest.mark.parametrize("text, line, why", [
    ('[\n  {"text": "a"}\n  {"text": "b"}\n]\n', 3, "Expecting ',' delimiter at column 3"),
    ('[\n  {"text": "a"},\n  {"text": "b"},\n]\n', 4, "Expecting value at column 1"),
])
def test_a_json_array_needs_a_comma_between_elements_and_none_after_the_last(tmp_path, text, line, why):
    """Both are what json.loads refuses (its message is the expected one) and what datasets fails to load."""
    path = tmp_path / "rows.json"
    path.write_text(text)
    with pytest.raises(json.JSONDecodeError) as refused:
        json.loads(text)
    assert (refused.value.lineno, f"{refused.value.msg} at column {refused.value.colno}") == (line, why)
    assert first_bad_record(str(path), SFT) == f"line {line} is not JSON ({why})"
    from datasets.exceptions import DatasetGenerationError

    with pytest.raises(DatasetGenerationError):
        load_with_datasets(str(path))


def test_csv_rows_are_named_by_line_as_pandas_counts_them(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('text,label\n"a, with a comma",1\nb,2,3\n')
    assert first_bad_record(str(path), SFT) == "line 3 has 3 fields and the header 2"
    with pytest.raises(Exception, match="An error occurred while generating the dataset"):
        load_with_datasets(str(path))  # pandas: "Expected 2 fields in line 3, saw 3"
    path.write_text("text,label\na,1\n,2\n")
    assert first_bad_record(str(path), SFT) == ("line 3 has an empty 'text'; every record needs 'text', as the first "
                                                "one has")


def test_parquet_nulls_are_named_by_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"text": ["a", "b", None, "d"]}), path)
    assert first_bad_record(path, SFT) == "row 3 has a null 'text'"
    (tmp_path / "damaged.parquet").write_bytes(b"PAR1 not really")
    assert first_bad_record(str(tmp_path / "damaged.parquet"), SFT).startswith("is not a Parquet file (")


def test_a_folder_left_to_datasets_is_read_whole_naming_the_file_of_the_bad_record(tmp_path):
    """No top-level file named for the split: datasets resolves the folder and builds every split in it."""
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    train = jsonl(folder / "sub" / "train.jsonl", GOOD)
    bad = jsonl(folder / "sub" / "test.jsonl", GOOD, broken_at=2)
    (folder / ".hidden.jsonl").write_text("not json\n")
    assert data_files(str(folder), "train") == [bad, train]
    assert first_bad_record(str(folder), SFT) == f"{bad} line 2 is not JSON (Unterminated string starting at column 10)"


def test_the_check_reads_the_files_the_worker_loads(tmp_path, monkeypatch):
    """A split's files are named for it, then a separator or a digit (datasets' convention): trainer_notes.jsonl is
    not the train split's, nor is a file in a sub-folder; the worker's load_split loads the same files."""
    import datasets

    from trl_ds.worker.data import load_split

    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    jsonl(folder / "train.jsonl", GOOD)
    jsonl(folder / "train_2.jsonl", GOOD[:3])
    for broken in (folder / "trainer_notes.jsonl", folder / "sub" / "train.jsonl"):
        jsonl(broken, GOOD, broken_at=1)
    bad_test = jsonl(folder / "test-00000.jsonl", GOOD, broken_at=3)
    assert data_files(str(folder), "train") == [str(folder / "train.jsonl"), str(folder / "train_2.jsonl")]
    assert first_bad_record(str(folder), SFT, "train") is None
    assert first_bad_record(str(folder), SFT, "test") == (f"{bad_test} line 3 is not JSON (Unterminated string "
                                                          f"starting at column 10)")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    assert len(load_split(str(folder), "train")) == 4 + 3


def test_launch_with_a_broken_line_exits_2_in_one_line_nothing_spawned(tmp_path):
    """The issue's case: `python -m trl_ds trainer.dataset_name=rows.jsonl` with one broken line."""
    path = jsonl(tmp_path / "rows.jsonl", GOOD * 50, broken_at=137)
    run_dir = tmp_path / "run"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "trl_ds", f"trainer.dataset_name={path}",
                           f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"trl_ds: trainer.dataset_name={path}: line 137 is not JSON (Unterminated string "
                                   f"starting at column 10). Fix or remove that record, or give another "
                                   f"trainer.dataset_name.")
    assert not run_dir.exists()  # nothing written, nothing spawned
    assert cpu_s < 3, cpu_s  # CPU seconds, not wall: the bound holds on a machine shared with other work


def test_the_evaluation_file_is_read_through_too(compose_cfg, tmp_path):
    from trl_ds.check.data_file import check_data_files

    train = jsonl(tmp_path / "train.jsonl", GOOD)
    held_out = jsonl(tmp_path / "held_out.jsonl", GOOD, broken_at=2, broken="{oops}\n")
    cfg = compose_cfg([f"trainer.dataset_name={train}", f"trainer.eval_dataset_name={held_out}",
                       "trainer.eval_strategy=steps", "trainer.eval_steps=5"])
    assert check_data_files(cfg) == [f"trainer.eval_dataset_name={held_out}: line 2 is not JSON (Expecting property "
                                     f"name enclosed in double quotes at column 2). Fix or remove that record, or "
                                     f"give another trainer.eval_dataset_name."]


def launch_problems(compose_cfg, overrides, run_dir, launching=True):
    from trl_ds.check.validate import validate
    from trl_ds.errors import ConfigError

    try:
        validate(compose_cfg(overrides), str(run_dir), launching)
    except ConfigError as err:
        return err.problems
    return []


@pytest.mark.parametrize("name, data, why", [
    ("rows.jsonl", b"", "0 bytes"),  # was "has columns (none)"
    ("rows.jsonl", b"\n \n", "no records"),
    ("rows.csv", b"text\n", "a header and no rows"),  # datasets: Instruction 'train' corresponds to no data
    ("rows.parquet", b"", "0 bytes"),  # was "is not a Parquet file (...). Fix or remove that record"
])
def test_an_empty_file_is_named_empty_with_the_fix(compose_cfg, tmp_path, name, data, why):
    path = tmp_path / name
    path.write_bytes(data)
    for launching in (True, False):  # the launch and the dry run say the same
        assert launch_problems(compose_cfg, [f"trainer.dataset_name={path}"], tmp_path / "run", launching) == [
            f"trainer.dataset_name={path} is empty ({why}). Write records into it, or give another "
            f"trainer.dataset_name."]


def test_a_parquet_file_of_0_rows_is_empty(compose_cfg, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), path)  # valid: datasets fails on BatchSize 0
    assert launch_problems(compose_cfg, [f"trainer.dataset_name={path}"], tmp_path / "run") == [
        f"trainer.dataset_name={path} is empty (0 rows). Write records into it, or give another trainer.dataset_name."]


def test_an_empty_json_shard_beside_others_loads_and_an_empty_csv_shard_does_not(compose_cfg, tmp_path, monkeypatch):
    import datasets

    from trl_ds.worker.data import load_split

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train-0.jsonl").write_text("")
    jsonl(folder / "train-1.jsonl", GOOD)
    assert launch_problems(compose_cfg, [f"trainer.dataset_name={folder}"], tmp_path / "run") == []
    assert len(load_split(str(folder), "train")) == len(GOOD)
    csvs = tmp_path / "csvs"
    csvs.mkdir()
    (csvs / "train-0.csv").write_text("text\n")
    (csvs / "train-1.csv").write_text("text\na\nb\n")
    assert launch_problems(compose_cfg, [f"trainer.dataset_name={csvs}"], tmp_path / "run") == [
        f"trainer.dataset_name={csvs}: {csvs / 'train-0.csv'} is empty (a header and no rows). Write records into "
        f"it or remove it, or give another trainer.dataset_name."]
    with pytest.raises(Exception, match="An error occurred while generating the dataset"):
        load_split(str(csvs), "train")  # the header-only shard's column has type null


def test_a_folders_test_split_is_checked_for_columns_when_evaluating(compose_cfg, tmp_path):
    """The rank's KeyError: 'text' on the test split is the same one line as the train split's."""
    folder = tmp_path / "data"
    folder.mkdir()
    jsonl(folder / "train.jsonl", GOOD)
    jsonl(folder / "test.jsonl", [{"question": "q", "answer": "a"}])
    overrides = [f"trainer.dataset_name={folder}"]
    assert launch_problems(compose_cfg, overrides, tmp_path / "run") == []  # no evaluation: test.jsonl is not read
    evaluating = overrides + ["trainer.eval_strategy=steps"]
    for launching in (True, False):
        assert launch_problems(compose_cfg, evaluating, tmp_path / "run", launching) == [
            f"trainer.dataset_name={folder}: {folder / 'test.jsonl'} has columns question, answer; trainer=sft needs "
            f"text or messages or prompt and completion (missing text). Give records like {{\"text\": \"...\"}}, or "
            f"trainer.dataset_name=tiny."]


def test_a_dry_run_reads_the_data_as_the_launch_does(tmp_path):
    """`python -m trl_ds ... dry_run=true` on a folder whose train.jsonl has a Latin-1 byte (the dry run's traceback
    was count_rows', the launch's a rank's from pyarrow) and whose test.jsonl lacks 'text': exit 2, a line each."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_bytes(GOOD_BYTES.replace(b"three", b"caf\xe9"))
    jsonl(folder / "test.jsonl", [{"question": "q"}])
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "trl_ds", f"trainer.dataset_name={folder}", "dry_run=true",
                           "trainer.eval_strategy=steps", f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "trl_ds: 2 problems in the config:",
        f"  - trainer.dataset_name={folder}: {folder / 'train.jsonl'} line 3 is not UTF-8 (byte 0xe9 at column 33). "
        f"Convert the file to UTF-8 (datasets reads UTF-8 only; e.g. iconv -f <its encoding> -t utf-8), or give "
        f"another trainer.dataset_name.",
        f"  - trainer.dataset_name={folder}: {folder / 'test.jsonl'} has columns question; trainer=sft needs text or "
        f"messages or prompt and completion (missing text). Give records like {{\"text\": \"...\"}}, or "
        f"trainer.dataset_name=tiny."]
    assert not run_dir.exists()
