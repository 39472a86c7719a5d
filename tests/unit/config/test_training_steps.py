"""Epochs (trainer.max_steps=-1) are counted into optimizer steps before launch; evaluation's needs are checked."""
import json

import pytest
from conftest import read_json, run_app

from tests.unit.check.test_trainer_rules import problems
from trl_ds.config.batch import Batch
from trl_ds.config.training_steps import file_rows, steps_per_epoch


@pytest.mark.parametrize("rows,micro,world,accumulation,steps", [
    (64, 2, 2, 2, 8),  # 32 batches, 16 per rank, 2 per step
    (65, 2, 2, 2, 9),  # 33 batches: the last round is padded, 17 per rank, the last step takes one
    (10, 4, 2, 1, 2),  # 3 batches over 2 ranks: 2 each
    (3, 8, 2, 4, 1),  # fewer rows than one global batch: still one step
])
def test_steps_per_epoch_by_hand(rows, micro, world, accumulation, steps):
    assert steps_per_epoch(rows, Batch(micro, world, accumulation)) == steps


def write_rows(path, n):
    path.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(n)))
    return str(path)


def test_epochs_are_counted_before_launch(tmp_path):
    data = write_rows(tmp_path / "rows.jsonl", 64)
    run_dir = tmp_path / "run"
    out = run_app([f"trainer.dataset_name={data}", "batch.global_size=8", "trainer.max_steps=-1",
                   "trainer.num_train_epochs=2.5", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    assert ("batch: global 8 = micro 2 × world 2 × accumulation 2; 20 optimizer steps (64 rows: 8 per epoch × 2.5 "
            "epochs)") in out.stdout
    assert read_json(run_dir / "plan.json")["training"] == {
        "max_steps": -1, "num_train_epochs": 2.5, "train_rows": 64, "steps_per_epoch": 8, "optimizer_steps": 20}
    assert read_json(run_dir / "ds_config.json")["steps_per_print"] > 20  # DeepSpeed's own printing stays off
    step = read_json(run_dir / "plan.json")["current"]["step_seconds"]  # the whole run: 20 steps × 2 ranks
    assert f"  time: 20 steps (2.5 epochs × 8 steps of 64 rows) × {step:.3g} s = " in out.stdout
    run = read_json(run_dir / "plan.json")["whole_run"]["current"]
    assert (run["seconds"], run["gpus"]) == (pytest.approx(20 * step), 2)


@pytest.mark.parametrize("content,name,rows", [
    ('{"a": 1}\n\n{"a": 2}\n', "d.jsonl", 2), ('[{"a": 1}, {"a": 2}, {"a": 3}]', "d.json", 3),
    ('{"a": 1}\n{"a": 2}\n', "d.json", 2), ("a,b\n1,2\n3,4\n", "d.csv", 2), ("x", "d.txt", None),
])
def test_file_rows(tmp_path, content, name, rows):
    (tmp_path / name).write_text(content)
    assert file_rows(str(tmp_path / name)) == rows


@pytest.mark.parametrize("overrides,message", [
    (["trainer.max_steps=-1", "trainer.num_train_epochs=0"],
     "trainer.num_train_epochs=0.0 must be positive with trainer.max_steps=-1."),
    (["trainer.max_steps=-2"], "trainer.max_steps=-2 must be at least 1. Or set trainer.max_steps=-1 to train "
                               "trainer.num_train_epochs=1.0 epochs."),
    (["trainer.eval_strategy=steps", "trainer.dataset_test_split=validation"],
     "trainer.dataset_test_split=validation: the built-in tiny dataset has the splits train and test. Use "
     "trainer.dataset_test_split=test, or trainer.eval_dataset_name=<a .jsonl file>."),
    (["trainer.eval_strategy=epoch", "trainer.dataset_name=a.jsonl"],
     "trainer.eval_strategy=epoch needs evaluation data, and trainer.dataset_name=a.jsonl is one file (one split). "
     "Set trainer.eval_dataset_name=<held-out file>."),
    (["trainer.eval_dataset_name=b.jsonl"], "trainer.eval_dataset_name=b.jsonl with trainer.eval_strategy=no: nothing "
                                            "would evaluate. Set trainer.eval_strategy=steps or epoch."),
    (["trainer.eval_strategy=steps", "trainer.eval_steps=0"], "trainer.eval_steps=0 must be at least 1."),
])
def test_each_epoch_and_eval_mistake_is_one_message(compose_cfg, overrides, message):
    assert problems(compose_cfg, overrides) == [message]


def test_eval_data_must_be_here(compose_cfg, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train.jsonl").write_text('{"text": "t"}\n')
    found = problems(compose_cfg, ["trainer.eval_strategy=steps", f"trainer.dataset_name={tmp_path}/folder"],
                     launching=True, tmp_path=tmp_path)
    assert found == [f"trainer.dataset_test_split=test: {tmp_path}/folder has no file for that split (datasets names "
                     f"splits by file: test.jsonl). Set trainer.dataset_test_split to one of its files' names, or "
                     f"trainer.eval_dataset_name=<file>."]
    (tmp_path / "folder" / "tests_notes.jsonl").write_text('{"text": "t"}\n')  # not the test split's (datasets')
    assert problems(compose_cfg, ["trainer.eval_strategy=steps", f"trainer.dataset_name={tmp_path}/folder"],
                    launching=True, tmp_path=tmp_path) == found
    found = problems(compose_cfg, ["trainer.eval_strategy=steps", "trainer.eval_dataset_name=/nonexistent/e.jsonl"],
                     launching=True, tmp_path=tmp_path)
    assert found == ["trainer.eval_dataset_name=/nonexistent/e.jsonl does not exist. Give an existing "
                     ".jsonl/.json/.parquet file, a hub dataset name, or trainer.eval_dataset_name=tiny."]


def test_the_tiny_set_has_a_held_out_split_also_for_another_training_set(tmp_path):
    data = write_rows(tmp_path / "rows.jsonl", 8)
    run_dir = tmp_path / "run"
    out = run_app([f"trainer.dataset_name={data}", "trainer.eval_dataset_name=tiny", "trainer.eval_strategy=epoch",
                   "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    test = (run_dir / "data" / "test.jsonl").read_text().splitlines()
    train = (run_dir / "data" / "train.jsonl").read_text().splitlines()
    assert (len(test), len(train)) == (64, 512)
    assert test != train[:64]  # drawn with another seed, not the first rows of the training set
