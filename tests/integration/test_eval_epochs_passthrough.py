"""Evaluation, epochs and TRL arguments by name, in three short real runs on 2 CPU ranks (about 15 s each idle) and
one relaunch.

- zero2-epochs: a 64-row dataset given by a TRL recipe (trainer.from_trl_config) that saves every epoch and keeps
  the last 2 checkpoints, global batch 8, trainer.max_steps=-1: one epoch, evaluated every 4 steps and before
  training (eval_on_start, a transformers argument by name); relaunched in a copy of its run dir with 3 epochs;
- zero3-neftune: the same data and evaluation at ZeRO-3, with NEFTune noise (neftune_noise_alpha): the noise is
  added in training only, so the evaluation before training equals ZeRO-2's while the first training loss does not;
- packing: TRL's packing joins rows up to max_length, so each step holds more tokens.
"""
import json
import math
import shutil

import pytest
from conftest import read_json, run_app

from trl_ds.worker.data import tiny_sft_examples

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.xdist_group("beside")]

GLOBAL_BATCH, MAX_LENGTH = 8, 64
EVAL = ["trainer.eval_strategy=steps", "+trainer.args.eval_on_start=true"]
RUNS = {
    "zero2-epochs": ["trainer.from_trl_config={data}/recipe.yaml", *EVAL, "zero=stage2", "trainer.max_steps=-1",
                     "trainer.eval_steps=4"],
    "zero3-neftune": [*EVAL, "zero=stage3", "trainer.max_steps=2", "trainer.eval_steps=2",
                      "+trainer.args.neftune_noise_alpha=5"],
    "packing": ["zero=stage2", "trainer.max_steps=2", "+trainer.args.packing=true"],
}
# save_strategy: epoch, a recipe's way, is what the relaunch test reads; saving changes none of the losses
RECIPE = "dataset_name: {data}/rows64.jsonl\nnum_train_epochs: 1\nsave_strategy: epoch\nsave_total_limit: 2\n"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for name, n, seed in (("rows64.jsonl", 64, 5), ("eval16.jsonl", 16, 6)):
        (folder / name).write_text("".join(json.dumps(e) + "\n" for e in tiny_sft_examples(n, seed)))
    (folder / "recipe.yaml").write_text(RECIPE.format(data=folder))
    return folder


_done = {}


def overrides(name, data):
    """The run's command line: the recipe's data, or rows64.jsonl by trainer.dataset_name."""
    args = [arg.format(data=data) for arg in RUNS[name]]
    if not any(arg.startswith("trainer.from_trl_config=") for arg in args):
        args.insert(0, f"trainer.dataset_name={data / 'rows64.jsonl'}")
    if "trainer.eval_strategy=steps" in args:
        args.append(f"trainer.eval_dataset_name={data / 'eval16.jsonl'}")
    return ["batch.global_size=8", *args]


def run(name, data, tmp_path_factory):
    """Run once per module; returns (run dir, summary, stdout, training rows, evaluation rows, stderr)."""
    if name not in _done:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        out = run_app(overrides(name, data), run_dir)
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
        with open(run_dir / "metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
        _done[name] = (run_dir, read_json(run_dir / "summary.json"), out.stdout,
                       [r for r in records if "loss" in r], [r for r in records if "eval_loss" in r], out.stderr)
    return _done[name]


def test_one_epoch_of_64_rows_at_global_batch_8_is_8_steps(data, tmp_path_factory):
    run_dir, summary, stdout, train, *_ = run("zero2-epochs", data, tmp_path_factory)
    training = read_json(run_dir / "plan.json")["training"]
    assert (training["train_rows"], training["steps_per_epoch"], training["optimizer_steps"]) == (64, 8, 8)
    assert "8 optimizer steps (64 rows: 8 per epoch × 1.0 epochs)" in stdout  # said before launch
    assert summary["steps"] == 64 // GLOBAL_BATCH == len(train)
    assert train[-1]["epoch"] == 1.0  # transformers' own count: the 8th step ends the epoch


def test_evaluation_rows_summary_and_printed_line(data, tmp_path_factory):
    _, summary, stdout, _, evals, stderr = run("zero2-epochs", data, tmp_path_factory)
    assert [r["step"] for r in evals] == [0, 4, 8]  # eval_on_start, then every trainer.eval_steps=4
    losses = [r["eval_loss"] for r in evals]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]  # it learns what it is tested on
    assert all("samples_per_second" not in r for r in evals)  # evaluation rows are not training throughput
    assert (summary["eval_loss"], summary["eval_step"], summary["evaluations"]) == (losses[-1], 8, 3)
    assert f"eval loss      {losses[-1]:.4f} at step 8 (3 evaluations)" in stdout
    # the live line's last word: step 8 and its own evaluation, logged after the step's training row
    live = [line for line in stderr.splitlines() if line.startswith("trl_ds: step ")]
    assert live[-1].startswith("trl_ds: step 8 | ") and f"| eval loss {losses[-1]:.4f} |" in live[-1], live


def test_evaluation_is_the_same_at_zero2_and_zero3_and_neftune_is_training_only(data, tmp_path_factory):
    _, _, _, train2, evals2, _ = run("zero2-epochs", data, tmp_path_factory)
    _, summary3, _, train3, evals3, _ = run("zero3-neftune", data, tmp_path_factory)
    assert [r["step"] for r in evals3] == [0, 2]
    assert evals3[0]["eval_loss"] == pytest.approx(evals2[0]["eval_loss"], abs=1e-5)  # the same weights, fp32
    assert math.isfinite(summary3["eval_loss"])
    # the same first batch and weights; only NEFTune's noise on the embeddings differs
    assert abs(train3[0]["loss"] - train2[0]["loss"]) > 1e-3


def test_packing_puts_more_tokens_in_each_step(data, tmp_path_factory):
    _, _, _, unpacked, *_ = run("zero2-epochs", data, tmp_path_factory)
    _, summary, _, packed, evals, _ = run("packing", data, tmp_path_factory)
    assert evals == [] and summary["eval_loss"] is None  # eval_strategy=no
    per_step = packed[0]["num_tokens"]  # TRL's running count of training tokens
    assert unpacked[0]["num_tokens"] * 2 < per_step <= GLOBAL_BATCH * MAX_LENGTH


def test_report_gains_an_eval_loss_column(data, tmp_path_factory, tmp_path):
    from trl_ds.study.report import write_report

    dirs = [str(run(name, data, tmp_path_factory)[0]) for name in ("zero2-epochs", "zero3-neftune")]
    text = write_report(dirs, dirs, str(tmp_path))
    assert "| final loss | eval loss |" in text
    assert f"{run('zero2-epochs', data, tmp_path_factory)[1]['eval_loss']:.4f}" in text


def test_a_recipes_save_strategy_epoch_checkpoints_every_epoch_and_resumes(data, tmp_path_factory, tmp_path):
    """save_strategy: epoch was refused; now each epoch ends in a checkpoint marked complete, and a relaunch with
    more epochs resumes from the last one. zero2-epochs' recipe: 1 epoch of 8 steps, keep the last 2 checkpoints;
    the relaunch runs in a copy of its run dir (a copied run dir trains in the copy), so the other tests read the
    one-epoch run."""
    run_dir, *_ = run("zero2-epochs", data, tmp_path_factory)
    assert complete_steps(run_dir) == [8]
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    again = run_app([*overrides("zero2-epochs", data), "trainer.num_train_epochs=3"], copy)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "  num_train_epochs: 1 -> trainer.num_train_epochs=1: overridden on the command line\n" in again.stdout
    assert f"trl_ds: resuming from {copy}/trainer/checkpoint-8" in again.stderr
    assert complete_steps(copy) == [16, 24]  # keep the last 2: checkpoint-8 rotated out
    with open(copy / "metrics.jsonl") as f:
        steps = [r["step"] for r in map(json.loads, f) if "loss" in r]
    assert steps == list(range(1, 25))  # each step once: the relaunch trained only epochs 2 and 3


def complete_steps(run_dir):
    markers = (run_dir / "trainer").glob("checkpoint-*/trl_ds_complete.json")
    return sorted(int(p.parent.name.split("-")[1]) for p in markers)
