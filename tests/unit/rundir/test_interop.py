"""accelerate.yaml and the "auto" ds_config.json, checked by accelerate's and transformers' own code.

accelerate.yaml goes through `accelerate launch`'s own steps short of spawning: its config loader, its argument
checks, the environment it would give each rank, and the DeepSpeedPlugin / ParallelismConfig a rank builds from it.
"""
import json

import pytest
import yaml

from trl_ds.cli.app import build
from trl_ds.rundir.interop import AUTO_KEYS, auto_ds_config, parallelism_config, write_interop_files


def written(compose_cfg, tmp_path, overrides):
    cfg = compose_cfg(overrides)
    prepared = build(cfg, str(tmp_path), launching=False)
    write_interop_files(cfg, str(tmp_path), prepared.ds_config, prepared.trainer_args)
    return cfg, prepared


def launch_env(config_file, monkeypatch):
    """`accelerate launch --config_file FILE train.py` up to the environment each rank would get."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config) + (
        ",mixed_precision" if mp_from_config else "")  # as launch_command does
    monkeypatch.setattr("accelerate.utils.launch.is_port_in_use", lambda port: False)
    _, env = prepare_deepspeed_cmd_env(args)
    return args, env


@pytest.mark.parametrize("overrides,processes", [(["zero=stage2"], 2), (["zero=stage3", "offload=cpu"], 2),
                                                 (["cluster=2x8", "zero=stage3"], 16)])
def test_accelerate_launch_accepts_accelerate_yaml(compose_cfg, tmp_path, monkeypatch, overrides, processes):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin

    cfg, prepared = written(compose_cfg, tmp_path, overrides)
    loaded = load_config_from_file(str(tmp_path / "accelerate.yaml"))
    assert (loaded.distributed_type, loaded.num_processes, loaded.num_machines) == ("DEEPSPEED", processes,
                                                                                   cfg.cluster.nodes)
    args, env = launch_env(tmp_path / "accelerate.yaml", monkeypatch)
    assert args.use_deepspeed and env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(tmp_path / "ds_config.json")
    assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == str(cfg.zero.stage == 3).lower()
    if cfg.cluster.nodes == 1:
        assert args.main_process_port > 0  # 0 in the file: accelerate picked a free one
    else:
        assert (args.main_process_ip, args.main_process_port) == (cfg.cluster.master_addr, cfg.cluster.master_port)
    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_DEEPSPEED_ZERO3_INIT",
                 "ACCELERATE_CONFIG_DS_FIELDS", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.setenv(name, env[name])
    plugin = DeepSpeedPlugin()  # what each rank builds from that environment; refuses conflicting settings
    # accelerate silences DeepSpeed's own step printing (steps_per_print: inf); every other key is ours
    assert {k: v for k, v in plugin.deepspeed_config.items() if k != "steps_per_print"} == \
        {k: v for k, v in prepared.ds_config.items() if k != "steps_per_print"}
    assert plugin.zero_stage == cfg.zero.stage


def test_accelerate_yaml_carries_ulysses(compose_cfg, tmp_path, monkeypatch):
    """sp=ulysses on 1x8 with sp.size=4: accelerate's env gives each rank the ParallelismConfig the worker builds."""
    from accelerate.parallelism_config import ParallelismConfig

    cfg, prepared = written(compose_cfg, tmp_path, ["cluster=1x8", "zero=stage3", "sp=ulysses", "sp.size=4"])
    _, env = launch_env(tmp_path / "accelerate.yaml", monkeypatch)
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    assert (env["PARALLELISM_CONFIG_SP_SIZE"], env["PARALLELISM_CONFIG_DP_SHARD_SIZE"]) == ("4", "2")
    for name, val in env.items():
        if name.startswith("PARALLELISM_CONFIG_"):
            monkeypatch.setenv(name, val)
    from_env, ours = ParallelismConfig(), parallelism_config(cfg)
    assert from_env._sizes == ours._sizes == {"dp_replicate": 1, "dp_shard": 2, "tp": 1, "cp": 1, "sp": 4}
    assert from_env.sp_backend == ours.sp_backend == "deepspeed"
    assert vars(from_env.sp_handler) == vars(ours.sp_handler)
    assert prepared.ds_config["sequence_parallel_size"] == 4


def test_auto_ds_config_is_filled_back_by_transformers(compose_cfg, tmp_path):
    """HfTrainerDeepSpeedConfig fills every "auto" from the trainer args to the concrete value trl_ds wrote."""
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    _, prepared = written(compose_cfg, tmp_path, ["zero=stage3", "cluster.gpus_per_node=1", "batch.global_size=8",
                                                  "trainer.learning_rate=3e-4", "trainer.weight_decay=0.01"])
    auto = auto_ds_config(prepared.ds_config)
    assert json.dumps(auto).count('"auto"') == len(AUTO_KEYS)
    trainer_yaml = yaml.safe_load((tmp_path / "trainer.yaml").read_text())
    keys = [k for k in trainer_yaml if k in TrainingArguments.__dataclass_fields__ and k != "deepspeed"]
    args = TrainingArguments(**{**{k: trainer_yaml[k] for k in keys}, "use_cpu": True})
    filled = HfTrainerDeepSpeedConfig(auto)
    filled.trainer_config_process(args)
    assert filled.config == prepared.ds_config
