"""Compose every shipped option and the zero × offload × cluster product through Hydra's compose API.

Every valid combination's ds_config.json must pass DeepSpeed's own config classes for its world size; every invalid
one must fail validation with the expected message.
"""
import itertools
from pathlib import Path

import pytest

from trl_ds.cli.app import build
from trl_ds.config.compose import CONFIG_DIR
from trl_ds.config.values import world_size
from trl_ds.errors import ConfigError

# every option of every group composed and built: make test only (not make test-fast)
pytestmark = pytest.mark.slow

GROUPS = ["model", "zero", "offload", "cluster", "trainer", "precision", "launcher", "peft", "sp", "tp"]
OPTIONS = {g: sorted(p.stem for p in (Path(CONFIG_DIR) / g).glob("*.yaml")) for g in GROUPS}
ZERO, OFFLOAD = ([o for o in OPTIONS[g] if o != "auto"] for g in ("zero", "offload"))  # auto: test_autofit.py
CLUSTERS = ["local", "1x1", "1x8", "2x8", "4x8"]


class FakeDist:
    """DeepSpeed's config assumes world size 1 outside a process group; this one answers N."""

    def __init__(self, world):
        self.world = world

    def get_rank(self):
        return 0

    def get_world_size(self, group=None):
        return self.world


def deepspeed_accepts(ds_config, world, monkeypatch):
    import deepspeed.runtime.config as ds_runtime_config

    monkeypatch.setattr(ds_runtime_config, "dist", FakeDist(world))
    parsed = ds_runtime_config.DeepSpeedConfig(ds_config)
    # Sequence-parallel ranks share samples: DeepSpeed multiplies by world / sequence_parallel_size.
    data_parallel = world // ds_config.get("sequence_parallel_size", 1)
    expected = ds_config["train_micro_batch_size_per_gpu"] * ds_config["gradient_accumulation_steps"] * data_parallel
    assert parsed.train_batch_size == ds_config.get("train_batch_size", expected) == expected
    assert parsed.zero_optimization_stage == ds_config["zero_optimization"]["stage"]
    return parsed


def expected_problem(zero, offload):
    stage = int(zero[-1])
    if offload == "nvme" and stage != 3:
        return "offload.optimizer=nvme needs zero=stage3"
    if offload == "cpu" and stage == 0:
        return "offload.optimizer=cpu needs a ZeRO stage of 1 or more"
    return None


def test_every_group_has_the_issue_options():
    assert OPTIONS["zero"] == ["auto", "stage0", "stage1", "stage2", "stage3"]
    assert OPTIONS["offload"] == ["auto", "cpu", "none", "nvme"]
    assert set(CLUSTERS) <= set(OPTIONS["cluster"])
    assert {"tiny", "qwen2.5-0.5b", "llama3.2-1b", "llama3-8b", "mistral-7b", "qwen2.5-14b",
            "llama3-70b"} <= set(OPTIONS["model"])


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in OPTIONS[g]])
def test_every_option_composes_and_builds(group, option, compose_cfg, monkeypatch):
    overrides = [f"{group}={option}"]
    if group == "precision" and option in ("bf16", "fp16"):
        overrides.append("cluster=1x8")  # half precision needs a GPU cluster
    if group == "offload" and option == "nvme":
        overrides.append("zero=stage3")  # ZeRO-Infinity is a stage-3 feature
    if group == "peft" and option == "qlora":
        overrides.append("model.intermediate_size=384")  # bitsandbytes' CPU block sizes (check/quantization.py)
    cfg = compose_cfg(overrides)
    prepared = build(cfg, "/tmp/run", launching=False)
    deepspeed_accepts(prepared.ds_config, world_size(cfg), monkeypatch)


@pytest.mark.parametrize("zero,offload,cluster", list(itertools.product(ZERO, OFFLOAD, CLUSTERS)))
def test_zero_offload_cluster_product(zero, offload, cluster, compose_cfg, monkeypatch):
    cfg = compose_cfg([f"zero={zero}", f"offload={offload}", f"cluster={cluster}"])
    problem = expected_problem(zero, offload)
    if problem:
        with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
            build(cfg, "/tmp/run", launching=False)
        return
    prepared = build(cfg, "/tmp/run", launching=False)
    parsed = deepspeed_accepts(prepared.ds_config, prepared.batch.world, monkeypatch)
    offloaded = parsed.zero_config.offload_optimizer
    expected_devices = (offload, f"OffloadDeviceEnum.{offload}")
    assert offloaded is None if offload == "none" else str(offloaded.device) in expected_devices
    assert "auto" not in str(prepared.ds_config)


def test_deepspeed_itself_rejects_a_batch_mismatch(compose_cfg, monkeypatch):
    """The check is real: the same config with a world size it was not built for fails in DeepSpeed."""
    prepared = build(compose_cfg(["cluster=1x8"]), "/tmp/run", launching=False)
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        deepspeed_accepts(prepared.ds_config, 16, monkeypatch)


def test_deepspeed_itself_rejects_a_misspelled_key(compose_cfg, monkeypatch):
    prepared = build(compose_cfg(["zero=stage3"]), "/tmp/run", launching=False)
    prepared.ds_config["zero_optimization"]["offload_parm"] = {"device": "cpu"}
    with pytest.raises(Exception, match="Extra inputs are not permitted"):
        deepspeed_accepts(prepared.ds_config, 2, monkeypatch)


def test_same_global_batch_on_1x8_and_2x8(compose_cfg):
    one = build(compose_cfg(["cluster=1x8", "batch.global_size=64"]), "/tmp/run", launching=False)
    two = build(compose_cfg(["cluster=2x8", "batch.global_size=64"]), "/tmp/run", launching=False)
    assert (one.ds_config["train_batch_size"], one.ds_config["gradient_accumulation_steps"]) == (64, 4)
    assert (two.ds_config["train_batch_size"], two.ds_config["gradient_accumulation_steps"]) == (64, 2)
    assert two.trainer_args["gradient_accumulation_steps"] == 2


def test_trainer_args_agree_with_ds_config_for_transformers(compose_cfg):
    """transformers' own consistency check (fill_match) finds no mismatch between the two files."""
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    prepared = build(compose_cfg(["zero=stage3", "offload=cpu", "batch.global_size=8"]), "/tmp/run", False)
    keys = [k for k in prepared.trainer_args if k in TrainingArguments.__dataclass_fields__ and k != "deepspeed"]
    args = TrainingArguments(**{**{k: prepared.trainer_args[k] for k in keys}, "use_cpu": True})
    hf = HfTrainerDeepSpeedConfig(dict(prepared.ds_config))
    hf.mismatches = []
    hf.trainer_config_process(args)
    # a single rank here: transformers computes train_batch_size with world 1, so only that key may differ
    assert [m for m in hf.mismatches if "train_batch_size" not in m] == []


def test_ulysses_batch_counts_data_parallel_ranks_only(compose_cfg, monkeypatch):
    """8 ranks, sp.size=4: 2 data-parallel ranks; DeepSpeed's own batch check holds for them."""
    prepared = build(compose_cfg(["cluster=1x8", "zero=stage3", "sp=ulysses", "sp.size=4", "batch.global_size=8"]),
                     "/tmp/run", launching=False)
    assert (prepared.batch.world, prepared.batch.micro, prepared.batch.accumulation) == (2, 2, 2)
    parsed = deepspeed_accepts(prepared.ds_config, 8, monkeypatch)
    assert parsed.train_batch_size == 8 and prepared.ds_config["sequence_parallel_size"] == 4


RATIO = ["offload.ratio=0.5", "zero.sub_group_size=50000"]  # sub-groups small enough for the tiny model to split


@pytest.mark.parametrize("zero,offload", [*itertools.product(ZERO, ["none", "cpu"]), ("stage3", "nvme")])
def test_offload_ratio_across_zero_and_offload(zero, offload, compose_cfg, monkeypatch):
    """Accepted exactly at stage 3 with CPU offload; there DeepSpeed parses the ratio."""
    cfg = compose_cfg([f"zero={zero}", f"offload={offload}", *RATIO])
    if (zero, offload) != ("stage3", "cpu"):
        with pytest.raises(ConfigError, match="offload.ratio=0.5"):
            build(cfg, "/tmp/run", launching=False)
        return
    parsed = deepspeed_accepts(build(cfg, "/tmp/run", launching=False).ds_config, 2, monkeypatch)
    assert parsed.zero_config.offload_optimizer.ratio == 0.5


BF16 = {"master": ["precision.bf16_master_weights_and_grads=true"],
        "master+states": ["precision.bf16_master_weights_and_grads=true", "precision.bf16_optimizer_states=true"]}


@pytest.mark.parametrize("zero,offload,option", [(z, o, b) for z in ZERO for o in ("none", "cpu") for b in BF16])
def test_bf16_options_across_zero_and_offload(zero, offload, option, compose_cfg, monkeypatch):
    """Where trl_ds accepts a combination, DeepSpeed's config parses it with the options on."""
    cfg = compose_cfg(["cluster=1x8", "precision=bf16", f"zero={zero}", f"offload={offload}", *BF16[option]])
    refused = zero == "stage0" or (option == "master" and offload == "none")
    if refused:
        with pytest.raises(ConfigError, match="precision.bf16_"):
            build(cfg, "/tmp/run", launching=False)
        return
    parsed = deepspeed_accepts(build(cfg, "/tmp/run", launching=False).ds_config, 8, monkeypatch)
    assert parsed.bfloat16_config.bf16_master_weights_and_grads is True
    assert parsed.bfloat16_config.bf16_optimizer_states is (option == "master+states")
