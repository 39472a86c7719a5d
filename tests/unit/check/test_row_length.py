"""A data row far longer than trainer.max_length keeps is named before launch (TRL tokenizes it whole first)."""
import json

from trl_ds.check.row_length import long_row_warning

SHORT = {"text": "question : what is one plus two ? answer : three"}


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return [len(json.dumps(r).encode()) for r in records]


def test_the_longest_row_over_100_bytes_per_token_is_named_with_the_count_of_the_others(tmp_path, compose_cfg):
    data = tmp_path / "train.jsonl"
    sizes = write_lines(data, [SHORT, {"text": "six " * 2000}, {"text": "x" * 1_000_000}, SHORT])
    assert sizes[1] > 100 * 64 > sizes[0]  # trl_ds's default trainer.max_length is 64 tokens
    cfg = compose_cfg([f"trainer.dataset_name={data}"])
    assert long_row_warning(cfg) == (
        f"trainer.dataset_name={data}: {data} line 3 is {sizes[2]:,} bytes, and 1 more row(s) of this file are over "
        f"6,400 bytes, far more than trainer.max_length=64 tokens keep (100 × 64 = 6,400 bytes); TRL tokenizes a row "
        f"whole before cutting it, so a rank's memory grows with it. Split or shorten those rows, or raise "
        f"trainer.max_length if the run should read them whole.")
    assert long_row_warning(compose_cfg([f"trainer.dataset_name={data}", "trainer.max_length=20000"])) is None


def test_rows_within_the_bound_the_built_in_data_and_a_json_array_pass(tmp_path, compose_cfg):
    data = tmp_path / "train.jsonl"
    write_lines(data, [SHORT] * 3 + [{"text": "y" * 6000}])
    assert long_row_warning(compose_cfg([f"trainer.dataset_name={data}"])) is None
    assert long_row_warning(compose_cfg([])) is None
    array = tmp_path / "array.json"  # a minified array is one line: its elements are the rows, not its lines
    array.write_text(json.dumps([SHORT] * 2000))
    assert long_row_warning(compose_cfg([f"trainer.dataset_name={array}"])) is None


def test_parquet_rows_count_their_string_values_and_the_eval_split_is_read(tmp_path, compose_cfg):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"text": [SHORT["text"]] * 3}), folder / "train.parquet")
    pq.write_table(pa.table({"prompt": ["a", "b" * 4000], "completion": ["c", "d" * 3000]}), folder / "test.parquet",
                   row_group_size=1)
    cfg = compose_cfg([f"trainer.dataset_name={folder}", "trainer.eval_strategy=steps"])
    assert long_row_warning(cfg).startswith(f"trainer.dataset_name={folder}: {folder / 'test.parquet'} row 2 is 7,000 "
                                            f"bytes, far more than")


def test_a_dry_run_prints_it_before_anything_is_spawned(tmp_path, compose_cfg, capsys):
    from trl_ds.cli.app import build, write_run_dir

    data = tmp_path / "train.jsonl"
    write_lines(data, [SHORT, {"text": "x" * 10_000}])
    cfg = compose_cfg([f"trainer.dataset_name={data}", "dry_run=true"])
    write_run_dir(cfg, build(cfg, str(tmp_path / "run"), launching=False))
    assert f"trl_ds: warning: trainer.dataset_name={data}: {data} line 2 is 10,012 bytes" in capsys.readouterr().err
