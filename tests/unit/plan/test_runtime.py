"""The whole run's time and GPU-hours beside the per-step figure: steps × seconds per step × GPUs, with the steps
from trainer.max_steps, from epochs over the data's rows, or from a number of training tokens (worked by hand)."""
import json

import pytest

from trl_ds.cli.plan import main
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError
from trl_ds.plan.memory import setup_from_config
from trl_ds.plan.runtime import duration, run_time, split_tokens


def cfg_and_setup(*overrides):
    cfg = compose(["model=llama3-8b", "cluster=1x8", *overrides])
    return cfg, setup_from_config(cfg)


def test_max_steps_by_hand():
    cfg, s = cfg_and_setup("trainer.max_steps=2000")
    rt = run_time(cfg, s, step_seconds=42.0, samples_per_step=64)
    # 2000 × 42 s = 84000 s = 23.33 h; × 8 GPUs = 186.67 GPU-hours
    assert (rt.steps, rt.seconds, rt.gpus) == (2000, 84000.0, 8)
    assert rt.gpu_hours == pytest.approx(186.6667, abs=1e-4)
    assert rt.describe() == ("2000 steps (trainer.max_steps) × 42 s = 23.3 h, 187 GPU-hours on 8 GPUs "
                             "(estimated)")


def test_epochs_by_hand(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(1000)))
    cfg, s = cfg_and_setup(f"trainer.dataset_name={data}", "trainer.max_steps=-1", "trainer.num_train_epochs=3",
                           "trainer.per_device_train_batch_size=4", "batch.global_size=64")
    rt = run_time(cfg, s, step_seconds=10.0, samples_per_step=64)
    # 1000 rows / micro 4 = 250 batches over 8 ranks: 32 each; accumulation 2: 16 steps per epoch; × 3 = 48 steps
    assert (rt.steps, rt.how) == (48, "3 epochs × 16 steps of 1000 rows")
    assert (rt.seconds, rt.gpu_hours) == (480.0, pytest.approx(480 * 8 / 3600))


def test_tokens_by_hand():
    cfg, s = cfg_and_setup("trainer.max_length=2048", "trainer.per_device_train_batch_size=4",
                           "batch.global_size=64")
    rt = run_time(cfg, s, step_seconds=1.5, samples_per_step=64, tokens=1e9)
    # 64 samples × 2048 tokens = 131072 per step; 1e9 / 131072 = 7629.4 -> 7630 steps; × 1.5 s = 11445 s = 3.18 h
    assert (rt.steps, rt.seconds) == (7630, 11445.0)
    assert rt.gpu_hours == pytest.approx(25.4333, abs=1e-4)
    assert rt.how == "1.00B tokens / 131072 per step"


def test_steps_not_known_before_launch_say_why():
    cfg, s = cfg_and_setup("trainer.max_steps=-1", "trainer.dataset_name=some/hub-dataset")
    rt = run_time(cfg, s, step_seconds=1.0, samples_per_step=16)
    assert (rt.steps, rt.seconds, rt.gpu_hours) == (None, None, None)
    assert rt.describe() == "not known before launch (a hub dataset is counted by the trainer)"


@pytest.mark.parametrize("seconds,text", [(42, "42 s"), (90, "1.5 min"), (84000, "23.3 h"), (4e6, "46.3 d")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_the_plan_states_the_whole_run(capsys):
    assert main(["model=llama3-8b", "cluster=1x8", "batch.global_size=64", "trainer.max_length=2048",
                 "--tokens=1e9", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for name, row in (("current", data["current"]), ("recommended", data["recommendation"])):
        run = data["whole_run"][name]
        assert run["optimizer_steps"] == 7630  # 1e9 / (64 × 2048), rounded up
        assert run["seconds"] == pytest.approx(7630 * row["step_seconds"])
        assert run["gpu_hours"] == pytest.approx(7630 * row["step_seconds"] * 8 / 3600)
    assert main(["model=llama3-8b", "cluster=1x8", "trainer.max_steps=100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("whole run, current: 100 steps (trainer.max_steps) × ")
    assert lines[-1].startswith("whole run, recommended: 100 steps (trainer.max_steps) × ")
    assert lines[-1].endswith(" GPU-hours on 8 GPUs")


@pytest.mark.parametrize("args", [["--tokens"], ["--tokens", "many"], ["--tokens=-5"]])
def test_a_bad_token_count_is_one_line(args, capsys):
    assert main(["model=llama3-8b", *args]) == 2
    assert capsys.readouterr().err.strip().endswith("give the number of training tokens, e.g. --tokens 2e9.")
    with pytest.raises(ConfigError):
        split_tokens(args)
