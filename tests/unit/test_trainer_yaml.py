"""trainer.yaml is TRL's own format: `trl sft --config trainer.yaml` parses it into SFTConfig unchanged."""
import yaml

from conftest import run_app


def test_trl_parser_loads_trainer_yaml(tmp_path):
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    run_dir = tmp_path / "run"
    out = run_app(["zero=stage3", "batch.global_size=8", "trainer.learning_rate=2e-4", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    script, training, model = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(run_dir / "trainer.yaml")])
    assert script.dataset_name == str(run_dir / "data")
    assert model.model_name_or_path == str(run_dir / "model")
    assert (training.learning_rate, training.gradient_accumulation_steps, training.max_length) == (2e-4, 2, 64)
    assert training.deepspeed == str(run_dir / "ds_config.json")
    assert training.hf_deepspeed_config.config["zero_optimization"]["stage"] == 3
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert saved["per_device_train_batch_size"] * 2 * saved["gradient_accumulation_steps"] == 8
