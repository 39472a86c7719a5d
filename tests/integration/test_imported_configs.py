"""Files users bring, trained for real: their own train.py (tests/integration/user_train.py), a DeepSpeed JSON
(LLaMA-Factory's ds_z2_config.json, verbatim) and an accelerate config (trl's zero2.yaml with the two lines a CPU user
changes), all in one run, give the run that the same setup given by overrides gives (stage_runs' ZeRO-2 run, shared
with test_training). The same run reports to TensorBoard. test_user_script reads it as the user's script run (the
script trains like the worker); the imported files need no worker run of their own, since what they set reaches the
script and the worker alike through the run dir's ds_config.json, accelerate.yaml and trainer.yaml."""
import json
import struct
from pathlib import Path

import pytest
import yaml
from conftest import require, run_app
from stage_runs import STEPS, stage_run

from tests.integration.user_train import user_train_py

pytestmark = pytest.mark.integration
IMPORTED = Path(__file__).resolve().parents[1] / "data" / "imported"


def losses(run_dir: Path):
    with open(run_dir / "metrics.jsonl") as f:
        return [(r["step"], r["loss"]) for r in map(json.loads, f) if "loss" in r]


def as_float32(x: float) -> float:
    """TensorBoard stores a scalar as a 32-bit float."""
    return struct.unpack("f", struct.pack("f", x))[0]


_users_files = {}


def users_files_run(tmp_path_factory):
    """(run dir, CompletedProcess) of the user's train.py (its data file by script_args, the run dir's model) with the
    imported accelerate and DeepSpeed files, 6 steps, reporting to TensorBoard; made once per session."""
    if "run" not in _users_files:
        folder = tmp_path_factory.mktemp("users_files")
        accelerate = yaml.safe_load((IMPORTED / "trl_accelerate_zero2.yaml").read_text())
        accelerate.update(num_processes=2, mixed_precision="no")  # 2 CPU ranks, fp32: what a CPU user edits
        (folder / "accelerate.yaml").write_text(yaml.safe_dump(accelerate))
        run_dir = folder / "run"
        out = run_app([f"script={user_train_py(tmp_path_factory)}", "script_args=[--data_file,data/train.jsonl]",
                       f"launcher.from_accelerate={folder / 'accelerate.yaml'}",
                       f"+deepspeed.from_file={IMPORTED / 'llamafactory_ds_z2_config.json'}",
                       f"trainer.max_steps={STEPS}", "trainer.report_to=tensorboard"], run_dir)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        _users_files["run"] = (run_dir, out)
    return _users_files["run"]


def test_imported_files_train_like_the_same_run_given_by_overrides(tmp_path_factory):
    run_dir, out = users_files_run(tmp_path_factory)
    reference, _ = stage_run("stage2", tmp_path_factory)  # zero=stage2, 2 CPU ranks, fp32, the same steps
    # the JSON holds the DeepSpeed settings, as accelerate's own deepspeed_config_file would: the YAML's give way
    assert (f"  deepspeed_config: offload_optimizer_device, offload_param_device, zero_stage not used: "
            f"deepspeed.from_file={IMPORTED / 'llamafactory_ds_z2_config.json'} wins") in out.stdout
    assert "  zero_optimization.round_robin_gradients: true -> zero.round_robin_gradients=true\n" in out.stdout
    assert len(losses(run_dir)) == STEPS
    assert losses(run_dir) == losses(reference)


def test_report_to_tensorboard_writes_what_tensorboard_reads(tmp_path_factory):
    require(__import__("importlib.util").util.find_spec("tensorboard") is not None,
            "tensorboard is not installed (pip install -e .[test])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = users_files_run(tmp_path_factory)
    events = sorted(run_dir.glob("trainer/runs/*/events.out.tfevents.*"))
    assert events, sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if "runs" in p.parts)
    reader = EventAccumulator(str(events[0].parent))
    reader.Reload()
    read = [(e.step, e.value) for e in reader.Scalars("train/loss")]
    assert read == [(step, as_float32(loss)) for step, loss in losses(run_dir)]
