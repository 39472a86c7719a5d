"""Files users bring, trained for real: a DeepSpeed JSON (LLaMA-Factory's ds_z2_config.json, verbatim) and an
accelerate config (trl's zero2.yaml with the two lines a CPU user changes) give the run that the same setup given by
overrides gives (stage_runs' ZeRO-2 run, shared with test_training). The same run reports to TensorBoard."""
import json
import struct
from pathlib import Path

import pytest
import yaml
from conftest import require, run_app
from stage_runs import STEPS, stage_run

pytestmark = pytest.mark.integration
IMPORTED = Path(__file__).resolve().parents[1] / "data" / "imported"


def losses(run_dir: Path):
    with open(run_dir / "metrics.jsonl") as f:
        return [(r["step"], r["loss"]) for r in map(json.loads, f) if "loss" in r]


def as_float32(x: float) -> float:
    """TensorBoard stores a scalar as a 32-bit float."""
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imported")
    accelerate = yaml.safe_load((IMPORTED / "trl_accelerate_zero2.yaml").read_text())
    accelerate.update(num_processes=2, mixed_precision="no")  # 2 CPU ranks, fp32: what a CPU user edits
    (folder / "accelerate.yaml").write_text(yaml.safe_dump(accelerate))
    run_dir = folder / "run"
    out = run_app([f"launcher.from_accelerate={folder / 'accelerate.yaml'}",
                   f"+deepspeed.from_file={IMPORTED / 'llamafactory_ds_z2_config.json'}",
                   f"trainer.max_steps={STEPS}", "trainer.report_to=tensorboard"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out


def test_imported_files_train_like_the_same_run_given_by_overrides(imported_run, tmp_path_factory):
    run_dir, out = imported_run
    reference, _ = stage_run("stage2", tmp_path_factory)  # zero=stage2, 2 CPU ranks, fp32, the same steps
    assert "  deepspeed_config.zero_stage: 2 -> zero.stage=2\n" in out.stdout
    assert "  zero_optimization.round_robin_gradients: true -> zero.round_robin_gradients=true\n" in out.stdout
    assert len(losses(run_dir)) == STEPS
    assert losses(run_dir) == losses(reference)


def test_report_to_tensorboard_writes_what_tensorboard_reads(imported_run):
    require(__import__("importlib.util").util.find_spec("tensorboard") is not None,
            "tensorboard is not installed (pip install -e .[test])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = imported_run
    events = sorted(run_dir.glob("trainer/runs/*/events.out.tfevents.*"))
    assert events, sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if "runs" in p.parts)
    reader = EventAccumulator(str(events[0].parent))
    reader.Reload()
    read = [(e.step, e.value) for e in reader.Scalars("train/loss")]
    assert read == [(step, as_float32(loss)) for step, loss in losses(run_dir)]


def test_a_recipes_save_strategy_epoch_checkpoints_every_epoch_and_resumes(tmp_path):
    """save_strategy: epoch was refused; now each epoch ends in a checkpoint marked complete, and a relaunch with
    more epochs resumes from the last one. 8 rows at global batch 4 (micro 2 × 2 ranks): 2 steps per epoch."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i} says {i * 7 % 5} and {i * 3}"}) + "\n" for i in range(8)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"dataset_name: {data}\nnum_train_epochs: 2\nsave_strategy: epoch\nsave_total_limit: 2\n")
    run_dir = tmp_path / "run"
    common = [f"trainer.from_trl_config={recipe}", "save_final_model=false"]
    first = run_app(common, run_dir)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert complete_steps(run_dir) == [2, 4]
    again = run_app([*common, "trainer.num_train_epochs=3"], run_dir)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "  num_train_epochs: 2 -> trainer.num_train_epochs=2: overridden on the command line\n" in again.stdout
    assert complete_steps(run_dir) == [4, 6]  # keep_last 2: checkpoint-2 rotated out
    assert [s for s, _ in losses(run_dir)][-2:] == [5, 6]  # the relaunch trained only the third epoch


def complete_steps(run_dir: Path):
    markers = (run_dir / "trainer").glob("checkpoint-*/trl_ds_complete.json")
    return sorted(int(p.parent.name.split("-")[1]) for p in markers)
