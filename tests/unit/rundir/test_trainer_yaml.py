"""trainer.yaml is TRL's own format: `trl <cmd> --config trainer.yaml` parses it into that trainer's config class.

The parse goes through the same steps as TRL's CLI (trl/cli/commands/training.py): the command's own parser, then
the leftover `accelerate_config` key becomes `accelerate launch --config_file accelerate.yaml`.
"""
import contextlib
import importlib

import pytest
import yaml
from conftest import run_app

CONFIG_CLASSES = {"sft": "SFTConfig", "dpo": "DPOConfig", "grpo": "GRPOConfig", "reward": "RewardConfig"}


def parse_like_trl_cli(command, path):
    """What `trl COMMAND --config trainer.yaml` does, run in the run dir, before it launches: (dataclasses...,
    accelerate launch args). trainer.yaml's paths are relative to the run dir."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    parser = importlib.import_module(f"trl.scripts.{command}").make_parser()
    with contextlib.chdir(path.parent):
        *parsed, config_rest, cli_rest = parser.parse_args_and_config(
            ["--config", path.name], return_remaining_strings=True, separate_remaining_strings=True)
        return parsed, resolve_accelerate_config_argument(config_rest + cli_rest)


@pytest.mark.parametrize("trainer", list(CONFIG_CLASSES))
def test_trl_cli_parses_trainer_yaml_into_its_config_class(tmp_path, trainer):
    run_dir = tmp_path / "run"
    out = run_app([f"trainer={trainer}", "zero=stage3", "batch.global_size=8", "trainer.learning_rate=2e-4",
                   "trainer.gradient_checkpointing=true", "trainer.report_to=tensorboard", "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    (script, training, model, _), launch_args = parse_like_trl_cli(trainer, run_dir / "trainer.yaml")
    assert type(training).__name__ == CONFIG_CLASSES[trainer]
    assert launch_args == ["--config_file", "./accelerate.yaml"]  # relative to the run dir: a copy is independent
    assert script.dataset_name == "./data"
    assert model.model_name_or_path == "./model"
    assert (training.learning_rate, training.gradient_accumulation_steps) == (2e-4, 2)
    assert training.activation_checkpointing is True and training.gradient_checkpointing is True
    assert training.report_to == ["tensorboard"]
    assert training.deepspeed == "./ds_config.json"
    assert training.hf_deepspeed_config.config["zero_optimization"]["stage"] == 3
    saved = yaml.safe_load((run_dir / "trainer.yaml").read_text())
    assert saved["per_device_train_batch_size"] * 2 * saved["gradient_accumulation_steps"] == 8
    assert (run_dir / "trainer.yaml").read_text().startswith(f"# cd RUN_DIR && trl {trainer} --config trainer.yaml")
    # CPU ranks: without use_cpu, transformers gives accelerate no backend and each rank counts itself alone.
    assert training.use_cpu is True and training.dataloader_drop_last is False
    # A dry run writes no model folder: the header says what writes it.
    assert "# First train once with trl_ds (bash launch.sh, or the same command without dry_run=true): that " \
           "writes the model folder model/ named below." in (run_dir / "trainer.yaml").read_text()


def test_gpu_runs_leave_use_cpu_out(compose_cfg):
    from trl_ds.config.batch import Batch
    from trl_ds.rundir.trainer_config import build_trainer_args

    args = build_trainer_args(compose_cfg(["cluster=1x8", "trainer.dataloader_drop_last=true"]), Batch(2, 8, 1),
                              "/run")
    assert "use_cpu" not in args and args["dataloader_drop_last"] is True


def test_trainer_options_reach_their_trainer(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["trainer=grpo", "trainer.num_generations=2", "trainer.max_completion_length=6",
                   "trainer.beta=0.04", "trainer.reward_funcs=[trl_ds.worker.rewards.arithmetic_reward,my.mod.fn]",
                   "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    (script, training, _, _), _ = parse_like_trl_cli("grpo", run_dir / "trainer.yaml")
    assert (training.num_generations, training.max_completion_length, training.beta) == (2, 6, 0.04)
    assert script.reward_funcs == ["trl_ds.worker.rewards.arithmetic_reward", "my.mod.fn"]
    (_, dpo, _, _), _ = parse_like_trl_cli("dpo", _dry_run(tmp_path / "dpo", ["trainer=dpo", "trainer.beta=0.3"]))
    assert (dpo.beta, dpo.max_length) == (0.3, 64)


def test_lora_becomes_trl_model_config(tmp_path):
    from trl import get_peft_config

    path = _dry_run(tmp_path / "run", ["peft=lora", "peft.r=4", "peft.target_modules=[q_proj,v_proj]"])
    (_, _, model, _), _ = parse_like_trl_cli("sft", path)
    lora = get_peft_config(model)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (4, 16, 0.05)
    assert set(lora.target_modules) == {"q_proj", "v_proj"}


def test_ulysses_pads_sequences_and_picks_attention(tmp_path):
    path = _dry_run(tmp_path / "run", ["sp=ulysses", "zero=stage3"])
    (_, training, model, _), _ = parse_like_trl_cli("sft", path)
    # On CPU every batch is padded to max_length: gloo gathers the sp group's batches only when shapes are equal.
    assert training.pad_to_multiple_of == training.max_length == 64
    assert model.attn_implementation == "sdpa"


def _dry_run(run_dir, args):
    out = run_app([*args, "dry_run=true"], run_dir)
    assert out.returncode == 0, out.stderr
    return run_dir / "trainer.yaml"
