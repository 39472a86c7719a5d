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

from trl_ds.check.deepspeed_verdict import top_level_reads
from trl_ds.cli.app import build
from trl_ds.config.compose import compose
from trl_ds.errors import ConfigError

# every imported DeepSpeed JSON through DeepSpeed's and transformers' own classes: make test only (not make test-fast)
pytestmark = pytest.mark.slow

IMPORTED = Path(__file__).resolve().parents[2] / "data" / "imported"
# Files refused before launch, each pinned with its exact lines (test_llamafactory_alst_..., test_llamafactory_fp8_...).
# axolotl's torch_compile files: DeepSpeed 0.19.8's CompileConfig itself refuses their compile.disable and .backend.
REFUSED = {"llamafactory_ds_z3_alst_config.json", "llamafactory_ds_z3_fp8_config.json",
           "axolotl_zero1_torch_compile.json", "axolotl_zero2_torch_compile.json"}
JSONS = sorted(p.name for p in IMPORTED.glob("*.json") if p.name not in REFUSED)
# Files that fix bf16 or fp16 on: trl_ds trains CPU ranks in fp32, so these resolve on an 8-GPU node (cluster=1x8).
GPU_ONLY = {n for n in JSONS if any(json.loads((IMPORTED / n).read_text()).get(k, {}).get("enabled") is True
                                    for k in ("bf16", "fp16"))}
TINY_HIDDEN = yaml.safe_load((Path(__file__).resolve().parents[3] / "conf/model/tiny.yaml").read_text())["hidden_size"]
# Where trl_ds's ds_config.json differs from transformers' on purpose (docs/interop.md, "Deliberate differences").
DELIBERATE = {
    "scheduler": "trl_ds writes no scheduler block: transformers builds trainer.lr_scheduler_type's scheduler",
    "optimizer.params.torch_adam": "trl_ds picks torch's AdamW on CPU ranks without offload (FusedAdam cannot build)",
    "train_batch_size (tp)": "with tensor_parallel trl_ds writes none: transformers fills micro × accumulation × the "
                             "whole world, DeepSpeed divides the world by autotp_size (docs/parallelism.md)",
    "zero_optimization (stage 3)": "allgather_bucket_size and round_robin_gradients: DeepSpeed's engine passes them "
                                   "to the stage 1/2 optimizer only (runtime/engine.py); trl_ds writes none at stage 3",
    "zero_optimization (tp)": "stage3_gather_16bit_weights_on_model_save: true with tensor_parallel at any stage, so "
                              "accelerate gathers the TP shards into final_model/ (docs/parallelism.md)",
    "_comment": "a comment: DeepSpeed reads no key starting with _; trl_ds writes none",
    "zero_optimization (stage 0)": "DeepSpeed reads no ZeRO key but stage at stage 0; trl_ds writes none",
    "fp16 (off)": "the loss-scaling keys of a disabled fp16 block: DeepSpeed reads none of them, trl_ds writes "
                  "{\"enabled\": false} only",
    "stage3_gather_16bit_weights_on_model_save (auto)": "accelerate's DeepSpeedPlugin fills it, not transformers; "
                                                        "trl_ds writes save_final_model's need (true by default)",
    "optimizer (Adam)": "DeepSpeed's Adam with adam_w_mode (true unless set) is AdamW: trl_ds writes type AdamW and "
                        "no adam_w_mode (the note names it: trl_ds picks the implementation)",
    "never read": "a top-level key DeepSpeed never reads (wall_clock_breakdown is read; comms_config is not): "
                  "printed as ignored, not written",
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
        elif field.alias and field.alias != name:  # axolotl writes max_live_parameters for stage3_max_live_...
            renamed[name] = field.alias
    return {renamed.get(k, k): v for k, v in zero.items()}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


STAGE12 = ("allgather_bucket_size", "round_robin_gradients")


def deliberate(key: str, theirs: dict) -> bool:
    if key.startswith("fp16.") and key != "fp16.enabled" and not theirs["fp16"]["enabled"]:
        return True  # DELIBERATE["fp16 (off)"]
    if key.startswith("zero_optimization.") and theirs["zero_optimization"]["stage"] == 0:
        return key != "zero_optimization.stage"  # DELIBERATE["zero_optimization (stage 0)"]
    if key.startswith("_"):
        return True  # DELIBERATE["_comment"]
    if key.split(".")[-1] in STAGE12 and theirs["zero_optimization"]["stage"] == 3:
        return True  # DELIBERATE["zero_optimization (stage 3)"]
    if key == "train_batch_size" and "tensor_parallel" in theirs:
        return True  # DELIBERATE["train_batch_size (tp)"]
    if key.endswith("stage3_gather_16bit_weights_on_model_save") and flat(theirs)[key] == "auto":
        return True  # DELIBERATE["stage3_gather_16bit_weights_on_model_save (auto)"]
    if key == "optimizer.type" and theirs["optimizer"]["type"] == "Adam" or key == "optimizer.params.adam_w_mode":
        return True  # DELIBERATE["optimizer (Adam)"]
    if "." not in key and key not in top_level_reads():
        return True  # DELIBERATE["never read"]
    return any(key == d or key.startswith(d + ".") for d in DELIBERATE)


def ours(tmp_path, name: str, *overrides: str):
    cfg = compose([f"+deepspeed.from_file={IMPORTED / name}", *overrides])
    return build(cfg, str(tmp_path / "run"), launching=False)


@functools.lru_cache(maxsize=None)
def both(name: str):
    """(trl_ds's ds_config.json, transformers' resolution) of one file, for the tiny model on 2 ranks (8 GPUs for a
    fixed bf16), 10 steps."""
    gpu = name in GPU_ONLY
    prepared = ours(Path(tempfile.mkdtemp()), name, *(["cluster=1x8"] if gpu else []))
    theirs = transformers_resolution(IMPORTED / name, prepared.trainer_args, world=8 if gpu else 2, steps=10)
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
    else:
        auto = theirs["zero_optimization"].get("stage3_gather_16bit_weights_on_model_save") == "auto"
        skip = (STAGE12 if want["stage"] == 3 else ()) + (  # DELIBERATE["zero_optimization (stage 3)"]
            ("gather_16bit_weights_on_model_save",) if "tensor_parallel" in theirs or auto else ())  # (tp), (auto)
        got, want = ({k: v for k, v in d.items() if k not in skip} for d in (got, want))
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
    assert ("  zero_optimization.stage: 1 -> zero.stage=1: wins over zero=stage3 (a group choice names no key; "
            "zero.stage=... on the command line wins over the file)\n") in out.stdout  # zero=stage3: a preset only
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


def test_deprecated_stage3_gather_fp16_and_numbers_written_as_floats(tmp_path):
    """DeepSpeed still reads stage3_gather_fp16_weights_on_model_save (a deprecated alias of the 16-bit key), and
    JSON's 1e9 / 1e5 are floats that DeepSpeed's int fields take as the integers they are."""
    ds = {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": False, "sub_group_size": 1e9,
                                "stage3_param_persistence_threshold": 1e5}}
    cfg = compose([f"+deepspeed.from_file={write(tmp_path, ds)}", "save_final_model=false"])
    zero = build(cfg, str(tmp_path / "run"), launching=False).ds_config["zero_optimization"]
    assert zero["stage3_gather_16bit_weights_on_model_save"] is False
    got = (zero["sub_group_size"], zero["stage3_param_persistence_threshold"])
    assert got == (1000000000, 100000) and all(type(v) is int for v in got)


def test_optimizer_and_scheduler_blocks_become_the_trainers_arguments(tmp_path):
    ds = {"optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                                    "weight_decay": 0.1}},
          "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                            "warmup_num_steps": 5, "warmup_type": "linear",
                                                            "total_num_steps": "auto"}}}
    prepared = ours(tmp_path, write(tmp_path, ds))
    t = prepared.trainer_args
    assert (t["learning_rate"], t["adam_beta1"], t["adam_beta2"], t["adam_epsilon"], t["weight_decay"],
            t["lr_scheduler_type"], t["warmup_steps"]) == (3e-4, 0.8, 0.95, 1e-6, 0.1, "linear", 5)
    params = prepared.ds_config["optimizer"]["params"]
    assert (params["lr"], params["betas"], params["eps"], params["weight_decay"]) == (3e-4, [0.8, 0.95], 1e-6, 0.1)


def test_a_log_warmup_is_refused():
    from trl_ds.check.deepspeed_json import ds_settings

    problems = ds_settings({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}, lambda: 64)[2]
    assert problems == ["scheduler.params.warmup_type: log: DeepSpeed warms up logarithmically unless warmup_type is "
                        "linear; transformers' schedules warm up linearly. Write \"warmup_type\": \"linear\""]


def file_settings(name: str):
    from trl_ds.check.deepspeed_json import ds_settings

    return ds_settings(json.loads((IMPORTED / name).read_text()), lambda: TINY_HIDDEN)


def test_llamafactory_autotp_file_is_tp_autotp():
    """tensor_parallel.autotp_size is DeepSpeed AutoTP's size: trl_ds's tp=autotp tp.size=N; the _comment is read
    as a comment (the oracle test above checks the written file against transformers')."""
    mappings, notes, problems = file_settings("llamafactory_ds_z2_autotp_config.json")
    assert [(m.key, m.value) for m in mappings if m.source.startswith("tensor_parallel")] == [
        ("tp.name", "autotp"), ("tp.size", 2)]
    assert notes[0] == ("_comment: suooprted model list: https://www.deepspeed.ai/tutorials/automatic-tensor-"
                        "parallelism/#supported-models: a comment (DeepSpeed reads no key starting with _); "
                        "not written")
    assert problems == []


def test_llamafactory_alst_block_is_sp_ulysses_and_its_tiling_is_refused(tmp_path):
    """LLaMA-Factory's ALST block (DeepSpeed never reads a sequence_parallel block): Ulysses of size 4 is
    sp=ulysses sp.size=4; its tiling and memory options have no trl_ds equivalent; comms_config and monitor_config,
    which DeepSpeed never reads, are a line each in a file (#59; typed on the command line they stay refused). On 8
    GPUs so that bf16 and sp.size 4 fit the cluster."""
    mappings, notes, _ = file_settings("llamafactory_ds_z3_alst_config.json")
    assert [(m.key, m.value) for m in mappings if m.source.startswith("sequence_parallel")] == [
        ("sp.name", "ulysses"), ("sp.size", 4)]
    assert ("sequence_parallel.ulysses.seq_length_is_variable: true: trl_ds always tells Ulysses that lengths vary "
            "(right for any lengths)") in notes
    assert "bf16.auto_cast: false: the trainers' forward inputs are token ids and masks, which DeepSpeed never " \
           "casts: it changes nothing (DeepSpeed's bf16 block has no such key); not written" in notes
    path = IMPORTED / "llamafactory_ds_z3_alst_config.json"
    with pytest.raises(ConfigError) as err:
        build(compose([f"+deepspeed.from_file={path}", "cluster=1x8"]), str(tmp_path / "run"), launching=False)
    where = f"deepspeed.from_file={path}"
    assert err.value.problems == [
        f"{where}: sequence_parallel.tiling.enabled: true: trl_ds does not tile the MLP and the loss (ALST's "
        "TiledMLP and tiled logits; same losses, more activation memory). Set it to false",
        f"{where}: sequence_parallel.memory_optimizations.enabled: true: LLaMA-Factory's own ALST option (DeepSpeed "
        "reads no sequence_parallel block); trl_ds has none. Set it to false"]
    assert "comms_config: {'verbose': False}: DeepSpeed 0.19.8 never reads comms_config and ignores it; not " \
           "written" in notes


def test_llamafactory_fp8_file_is_refused(tmp_path):
    path = IMPORTED / "llamafactory_ds_z3_fp8_config.json"
    with pytest.raises(ConfigError) as err:
        build(compose([f"+deepspeed.from_file={path}"]), str(tmp_path / "run"), launching=False)
    assert err.value.problems == [
        f"deepspeed.from_file={path}: fp8.enabled: true: DeepSpeed 0.19.8 reads no fp8 block and trl_ds trains in "
        "fp32, fp16 or bf16; drop the block (precision=bf16 for 16-bit training)"]


def test_fp16_auto_cast_changes_nothing_for_token_inputs():
    """jonathan.json's fp16.auto_cast: DeepSpeed casts floating-point forward inputs only (engine._cast_inputs_half);
    the oracle test above checks the rest of the file."""
    notes = file_settings("llamafactory_jonathan.json")[1]
    assert "fp16.auto_cast: true: the trainers' forward inputs are token ids and masks, which DeepSpeed never " \
           "casts: it changes nothing; not written" in notes
