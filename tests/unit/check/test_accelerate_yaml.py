"""launcher.from_accelerate: accelerate configs from other projects, read as accelerate reads them.

The oracle is accelerate's own loader (commands/config/config_args.load_config_from_file) and DeepSpeedPlugin (with
set_mixed_precision, as Accelerator calls it), then DeepSpeed's DeepSpeedZeroConfig; trl_ds's code only produces the
side under test.
"""
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_app

from trl_ds.cli.app import build
from trl_ds.config.compose import compose
from trl_ds.config.values import value, world_size
from trl_ds.errors import ConfigError

IMPORTED = Path(__file__).resolve().parents[2] / "data" / "imported"
ZERO_YAMLS = ["trl_accelerate_zero1.yaml", "trl_accelerate_zero2.yaml", "trl_accelerate_zero3.yaml"]


def accelerate_view(path: Path):
    """(accelerate's ClusterConfig, the DeepSpeed dict its DeepSpeedPlugin builds) for one config file."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin

    conf = load_config_from_file(str(path))
    keys = ("zero_stage", "offload_optimizer_device", "offload_param_device", "zero3_init_flag",
            "zero3_save_16bit_model", "gradient_accumulation_steps", "gradient_clipping")
    plugin = DeepSpeedPlugin(**{k: v for k, v in conf.deepspeed_config.items() if k in keys})
    plugin.set_mixed_precision(conf.mixed_precision)
    return conf, plugin.deepspeed_config


def no_offload_as_absent(zero: dict) -> dict:
    """DeepSpeed offloads nothing for an offload block of device none (runtime/zero checks device != none)."""
    return {k: v for k, v in zero.items()
            if not (k.startswith("offload_") and isinstance(v, dict) and v.get("device") == "none")}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def ours(tmp_path, path, *overrides):
    cfg = compose([f"launcher.from_accelerate={path}", *overrides])
    return cfg, build(cfg, str(tmp_path / "run"), launching=False)


@pytest.mark.parametrize("name", ZERO_YAMLS)
def test_trls_accelerate_configs_import_as_accelerate_reads_them(tmp_path, name):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    conf, plugin_ds = accelerate_view(IMPORTED / name)
    cfg, prepared = ours(tmp_path, IMPORTED / name, "cluster=1x8")  # the files' num_processes: 8
    assert (world_size(cfg), cfg.cluster.nodes, cfg.cluster.node_rank, value(cfg.launcher.rdzv_backend)) == \
        (conf.num_processes, conf.num_machines, conf.machine_rank, conf.rdzv_backend)
    written, stage = prepared.ds_config, plugin_ds["zero_optimization"]["stage"]
    for key, want in flat(plugin_ds).items():
        # Deliberate (docs/interop.md): steps_per_print (the plugin's inf, trl_ds's own); stage-3 keys below stage 3
        # (DeepSpeed reads none, trl_ds writes none); offload blocks of device none (compared as absent below).
        deliberate = key == "steps_per_print" or ".offload_" in f".{key}" or (
            stage < 3 and key.startswith("zero_optimization.stage3_"))
        if want != "auto" and not deliberate:
            assert flat(written).get(key) == want, key
    got = DeepSpeedZeroConfig(**no_offload_as_absent(written["zero_optimization"])).model_dump()
    assert got == DeepSpeedZeroConfig(**no_offload_as_absent(plugin_ds["zero_optimization"])).model_dump()


@pytest.mark.parametrize("name,kind", [("trl_accelerate_multi_gpu.yaml", "MULTI_GPU"),
                                       ("trl_accelerate_fsdp2.yaml", "FSDP")])
def test_a_config_that_is_not_deepspeed_is_refused_saying_what_trl_ds_runs(tmp_path, name, kind):
    with pytest.raises(ConfigError) as err:
        ours(tmp_path, IMPORTED / name, "cluster=1x8")
    assert f"launcher.from_accelerate={IMPORTED / name}: distributed_type: {kind}: trl_ds runs DeepSpeed ZeRO only " \
           f"(zero=stage0 is plain data parallelism like MULTI_GPU, zero=stage3 shards like FSDP)." \
           in err.value.problems[0]


def test_num_processes_unlike_the_world_is_refused_with_the_numbers(tmp_path):
    with pytest.raises(ConfigError) as err:
        ours(tmp_path, IMPORTED / "trl_accelerate_zero2.yaml", "precision=fp32")  # cluster=local: 1 × 2 ranks
    assert f"launcher.from_accelerate={IMPORTED / 'trl_accelerate_zero2.yaml'}: num_processes: 8 is not this " \
           f"cluster's world 2 (cluster.nodes × cluster.gpus_per_node). Choose a cluster of 8 ranks (e.g. " \
           f"cluster.nodes=1 cluster.gpus_per_node=8), or change num_processes." in err.value.problems


def test_a_deepspeed_config_file_is_read_from_the_working_folder(tmp_path, monkeypatch):
    """accelerate launch passes deepspeed_config_file on as ACCELERATE_DEEPSPEED_CONFIG_FILE and DeepSpeedPlugin opens
    it as given: relative to the working folder, not the YAML's (Why 4 of #59: trl_ds read it from the YAML's)."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "yamls" / "configs").mkdir(parents=True)
    shutil.copy(IMPORTED / "llamafactory_ds_z2_offload_config.json", tmp_path / "configs" / "z2.json")
    shutil.copy(IMPORTED / "llamafactory_ds_z3_config.json", tmp_path / "yamls" / "configs" / "z2.json")  # a decoy
    path = tmp_path / "yamls" / "acc.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_machines": 1, "num_processes": 2,
                                    "mixed_precision": "no",
                                    "deepspeed_config": {"deepspeed_config_file": "configs/z2.json"}}))
    monkeypatch.chdir(tmp_path)
    _, prepared = ours(tmp_path, path)
    zero = prepared.ds_config["zero_optimization"]
    source = json.loads((IMPORTED / "llamafactory_ds_z2_offload_config.json").read_text())["zero_optimization"]
    assert (zero["stage"], zero["offload_optimizer"]["device"], zero["allgather_bucket_size"],
            zero["round_robin_gradients"]) == (source["stage"], "cpu", source["allgather_bucket_size"], True)


@pytest.mark.slow  # a fresh interpreter
def test_a_run_dirs_own_accelerate_yaml_imports_back_to_the_same_run(tmp_path, monkeypatch):
    """Round trip: the accelerate.yaml (and the ds_config.json it names) of a run dir give back the same files, read
    from the run dir as its first line says (`cd RUN_DIR && accelerate launch --config_file accelerate.yaml`)."""
    from trl_ds.cli.app import write_run_dir

    first = run_app(["zero=stage3", "offload=cpu", "trainer.max_grad_norm=0.5", "dry_run=true"], tmp_path / "a")
    assert first.returncode == 0, first.stderr
    monkeypatch.chdir(tmp_path / "a")
    cfg = compose(["launcher.from_accelerate=accelerate.yaml"])
    write_run_dir(cfg, build(cfg, str(tmp_path / "b"), launching=False))
    for name in ("ds_config.json", "accelerate.yaml"):
        assert (tmp_path / "b" / name).read_text() == (tmp_path / "a" / name).read_text(), name


def test_deepspeed_keys_beside_a_config_file_are_refused_as_accelerate_refuses_them(tmp_path, monkeypatch):
    """accelerate's DeepSpeedPlugin._deepspeed_config_checks raises for zero_stage (and the other keys its list
    names) beside deepspeed_config_file; trl_ds says so before launch."""
    shutil.copy(IMPORTED / "llamafactory_ds_z2_config.json", tmp_path / "z2.json")
    monkeypatch.chdir(tmp_path)  # accelerate opens deepspeed_config_file from the working folder
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no",
                                    "deepspeed_config": {"deepspeed_config_file": "z2.json", "zero_stage": 3,
                                                         "zero3_init_flag": False}}))
    with pytest.raises(ConfigError) as err:
        ours(tmp_path, path)
    assert err.value.problems == [f"launcher.from_accelerate={path}: deepspeed_config.zero_stage: 3: beside "
                                  f"deepspeed_config_file accelerate refuses it (the JSON holds it); move it into the "
                                  f"JSON."]


def test_trl_ds_export_lets_the_command_line_win_over_an_imported_file(tmp_path):
    """Outside Hydra's main (trl-ds export composes itself) the overrides still win over the file's values."""
    from trl_ds.cli.export import export

    export(str(tmp_path / "out"), [f"launcher.from_accelerate={IMPORTED / 'trl_accelerate_zero3.yaml'}", "cluster=1x8",
                                   "zero.stage=2"], auto=False)
    assert json.loads((tmp_path / "out" / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2
