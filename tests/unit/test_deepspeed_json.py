"""deepspeed.from_file: DeepSpeed JSONs from other projects, resolved as transformers resolves them.

The oracle is transformers' own HfTrainerDeepSpeedConfig (trainer_config_process + trainer_config_finalize) run on the
same file for the same model, trainer arguments and world, then DeepSpeed's own config classes; trl_ds's code only
produces the side under test.
"""
import functools
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import run_app

from trl_ds.cli.app import build
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError

IMPORTED = Path(__file__).resolve().parents[1] / "data" / "imported"
JSONS = sorted(p.name for p in IMPORTED.glob("*.json"))
TINY_HIDDEN = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf/model/tiny.yaml").read_text())["hidden_size"]
# Where trl_ds's ds_config.json differs from transformers' on purpose (docs/interop.md, "Deliberate differences").
DELIBERATE = {
    "scheduler": "trl_ds writes no scheduler block: transformers builds trainer.lr_scheduler_type's scheduler",
    "optimizer.params.torch_adam": "trl_ds picks torch's AdamW on CPU ranks without offload (FusedAdam cannot build)",
    "zero_optimization (stage 0)": "DeepSpeed reads no ZeRO key but stage at stage 0; trl_ds writes none",
    "fp16 (off)": "the loss-scaling keys of a disabled fp16 block: DeepSpeed reads none of them, trl_ds writes "
                  "{\"enabled\": false} only",
}


class Args:
    """TrainingArguments for world ranks: transformers reads the world from accelerate's state, 1 in one process."""

    def __new__(cls, world: int, **kwargs):
        from transformers import TrainingArguments

        class WorldArgs(TrainingArguments):
            @property
            def world_size(self):
                return world

        return WorldArgs(**kwargs)


def transformers_resolution(path: Path, trainer: dict, world: int, steps: int) -> dict:
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    names = ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "adam_beta1",
             "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm", "warmup_steps", "bf16", "fp16")
    args = Args(world, output_dir="/tmp/unused", use_cpu=True, **{k: trainer[k] for k in names})
    hf = HfTrainerDeepSpeedConfig(str(path))
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, SimpleNamespace(config=SimpleNamespace(hidden_size=TINY_HIDDEN)), steps)
    return hf.config


def canonical(zero: dict) -> dict:
    """A zero block with DeepSpeed's deprecated names written as the fields they set (DeepSpeed's own metadata)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    fields = DeepSpeedZeroConfig.model_fields
    renamed = {}
    for name, field in fields.items():
        extra = field.json_schema_extra or {}
        if extra.get("deprecated") and extra.get("new_param") in fields:
            renamed[field.alias or name] = fields[extra["new_param"]].alias or extra["new_param"]
    return {renamed.get(k, k): v for k, v in zero.items()}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def deliberate(key: str, theirs: dict) -> bool:
    if key.startswith("fp16.") and key != "fp16.enabled" and not theirs["fp16"]["enabled"]:
        return True  # DELIBERATE["fp16 (off)"]
    if key.startswith("zero_optimization.") and theirs["zero_optimization"]["stage"] == 0:
        return key != "zero_optimization.stage"  # DELIBERATE["zero_optimization (stage 0)"]
    return any(key == d or key.startswith(d + ".") for d in DELIBERATE)


def ours(tmp_path, name: str, *overrides: str):
    cfg = compose([f"+deepspeed.from_file={IMPORTED / name}", *overrides])
    return build(cfg, str(tmp_path / "run"), launching=False)


@functools.lru_cache(maxsize=None)
def both(name: str):
    """(trl_ds's ds_config.json, transformers' resolution) of one file, for the tiny model on 2 ranks, 10 steps."""
    prepared = ours(Path(tempfile.mkdtemp()), name)
    theirs = transformers_resolution(IMPORTED / name, prepared.trainer_args, world=2, steps=10)
    return prepared.ds_config, {**theirs, "zero_optimization": canonical(theirs["zero_optimization"])}


@pytest.mark.parametrize("name", JSONS)
def test_each_imported_json_resolves_as_transformers_resolves_it(name):
    written, theirs = both(name)
    mine = flat(written)
    for key, want in flat(theirs).items():
        if not deliberate(key, theirs):
            assert key in mine and mine[key] == want, (key, mine.get(key), want)


@pytest.mark.parametrize("name", JSONS)
def test_deepspeed_reads_the_same_zero_block_from_both(name):
    """Keys the file leaves out: DeepSpeed's defaults apply to transformers' JSON, trl_ds writes its own; DeepSpeed's
    parsed DeepSpeedZeroConfig must be the same either way."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    written, theirs = both(name)
    got = DeepSpeedZeroConfig(**written["zero_optimization"]).model_dump()
    want = DeepSpeedZeroConfig(**theirs["zero_optimization"]).model_dump()
    if want["stage"] == 0:  # DELIBERATE["zero_optimization (stage 0)"]
        got, want = got["stage"], want["stage"]
    assert got == want


def test_the_stage_3_buckets_follow_the_models_hidden_size(tmp_path):
    """transformers' hand formulas for hidden 128: 128² = 16384, int(0.9 · 128²) = 14745, 10 · 128 = 1280."""
    zero = ours(tmp_path, "llamafactory_ds_z3_config.json").ds_config["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
            zero["stage3_param_persistence_threshold"]) == (16384, 14745, 1280)


def test_a_run_dirs_own_ds_config_imports_back_to_itself(tmp_path):
    """Round trip: a run dir's ds_config.json, imported into a default run, gives back the same file."""
    first = run_app(["zero=stage3", "offload=cpu", "trainer.learning_rate=3e-4", "+zero.allgather_partitions=false",
                     "trainer.max_grad_norm=0.5", "dry_run=true"], tmp_path / "a")
    assert first.returncode == 0, first.stderr
    written = json.loads((tmp_path / "a" / "ds_config.json").read_text())
    again = ours(tmp_path, str(tmp_path / "a" / "ds_config.json")).ds_config
    assert again == written


def write(tmp_path, ds: dict) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    return str(path)


def test_spellings_found_in_the_wild(tmp_path):
    ds = {"bfloat16": {"enabled": True}, "zero_optimization": {
        "stage": 3, "cpu_offload": True, "max_live_parameters": 2e8, "max_reuse_distance": 3e8,
        "gather_16bit_weights_on_model_save": False, "offload_param": {"device": "none"}}}
    cfg = compose([f"+deepspeed.from_file={write(tmp_path, ds)}", "cluster=1x8", "save_final_model=false"])
    zero = build(cfg, str(tmp_path / "run"), launching=False).ds_config["zero_optimization"]
    assert (zero["stage3_max_live_parameters"], zero["stage3_max_reuse_distance"]) == (200000000, 300000000)
    assert zero["stage3_gather_16bit_weights_on_model_save"] is False
    assert zero["offload_optimizer"]["device"] == "cpu" and "offload_param" not in zero
    assert cfg.precision.dtype.value == "bf16"


def test_a_stage_3_key_under_stage_2_is_named_as_ignored(tmp_path, capsys):
    from trl_ds.check.deepspeed_json import ds_settings

    mappings, notes, problems = ds_settings({"zero_optimization": {
        "stage": 2, "stage3_max_live_parameters": 1e9, "offload_param": {"device": "cpu"}}}, lambda: 64)
    assert notes == ["zero_optimization.stage3_max_live_parameters: 1000000000.0: DeepSpeed ignores it at stage 2; "
                     "not written",
                     "zero_optimization.offload_param: {'device': 'cpu'}: DeepSpeed ignores offload_param at stage 2;"
                     " not written"]
    assert problems == []


def test_contradictions_and_unknown_blocks_are_refused_with_numbers(tmp_path):
    ds = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}, "scheduler": {"type": "OneCycle", "params": {}},
          "zero_optimization": {"stage": 2, "allgather_bucket_size": "auto"}}
    with pytest.raises(ConfigError) as err:
        build(compose([f"+deepspeed.from_file={write(tmp_path, ds)}"]), str(tmp_path / "run"), launching=False)
    where = f"deepspeed.from_file={tmp_path / 'ds.json'}"
    assert f"{where}: train_batch_size: 32 cannot be made by this cluster: train_micro_batch_size_per_gpu 4 × " \
           f"gradient_accumulation_steps 2 × world 2 = 16." in "\n".join(err.value.problems)
    for message in (f"{where}: optimizer.type: Lamb: trl_ds trains with DeepSpeed's AdamW",
                    f"{where}: scheduler.type: OneCycle: trl_ds schedules with transformers' lr_scheduler_type",
                    f"{where}: zero_optimization.allgather_bucket_size: auto: transformers fills auto only in"):
        assert any(p.startswith(message) for p in err.value.problems), (message, err.value.problems)


def test_the_command_line_wins_and_says_so(tmp_path):
    path = write(tmp_path, {"gradient_clipping": 0.3, "zero_optimization": {"stage": 1}})
    out = run_app([f"+deepspeed.from_file={path}", "trainer.max_grad_norm=0.7", "zero=stage3", "dry_run=true"],
                  tmp_path / "run")
    assert out.returncode == 0, out.stderr
    assert "  gradient_clipping: 0.3 -> trainer.max_grad_norm=0.3: overridden on the command line\n" in out.stdout
    assert "  zero_optimization.stage: 1 -> zero.stage=1\n" in out.stdout  # zero=stage3 chooses a preset only
    written = json.loads((tmp_path / "run" / "ds_config.json").read_text())
    assert (written["gradient_clipping"], written["zero_optimization"]["stage"]) == (0.7, 1)


def test_a_rank_loads_deepspeed_keys_given_by_name(tmp_path):
    """A rank re-types config.yaml with the schema; DeepSpeed keys by their own names (an imported file's, or
    +zero.NAME) were refused there ("Key 'allgather_partitions' not in 'ZeroConfig'") and every rank failed."""
    from omegaconf import OmegaConf

    from trl_ds.config.values import undeclared
    from trl_ds.rundir.layout import load_run_config

    cfg = compose(["+zero.allgather_partitions=false", "+offload.pipeline_read=true", "offload=cpu"])
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    loaded = load_run_config(str(tmp_path))
    assert (undeclared(loaded, "zero"), undeclared(loaded, "offload")) == ({"allgather_partitions": False},
                                                                          {"pipeline_read": True})


def test_fp16_and_bf16_both_enabled_are_refused():
    from trl_ds.check.deepspeed_json import ds_settings

    problems = ds_settings({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, lambda: 64)[2]
    assert problems == ["fp16.enabled and bf16.enabled: true: both true; DeepSpeed trains in one of them. Keep one "
                        "enabled"]
