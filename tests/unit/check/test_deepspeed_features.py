"""offload.ratio, precision.bf16_*, ZeRO++ parts and ZenFlow: written into ds_config.json by DeepSpeed's names,
accepted by DeepSpeed's own config where trl_ds accepts them, refused where DeepSpeed's code refuses or ignores them."""
import pytest

from tests.unit.check.test_deepspeed_keys import built, deepspeed_parse, refusal

GPU = ["cluster=1x8", "precision=bf16"]


def test_offload_ratio_is_deepspeeds_offload_optimizer_ratio(compose_cfg, monkeypatch):
    ds = built(compose_cfg, ["zero=stage3", "offload=cpu", "offload.ratio=0.3", "zero.sub_group_size=50000"])
    assert ds["zero_optimization"]["offload_optimizer"]["ratio"] == 0.3
    assert deepspeed_parse(ds, 2, monkeypatch).zero_config.offload_optimizer.ratio == 0.3
    assert "ratio" not in built(compose_cfg, ["zero=stage3", "offload=cpu"])["zero_optimization"]["offload_optimizer"]


@pytest.mark.parametrize("overrides,message", [
    (["zero=stage2", "offload=cpu", "offload.ratio=0.5"], "offload.ratio=0.5 needs zero=stage3 (got zero.stage=2)"),
    (["zero=stage3", "offload.ratio=0.5"], "offload.ratio=0.5 splits the optimizer between the device and the CPU, "
                                           "and offload.optimizer=none here. Use offload=cpu, or offload.ratio=1."),
    (["zero=stage3", "offload=nvme", "offload.ratio=0.5"], "and offload.optimizer=nvme here"),
    (["zero=stage3", "offload=cpu", "offload.ratio=1.5"], "offload.ratio=1.5 must be between 0 and 1"),
    # the tiny model: 869,504 parameters (embed 65,536 + 4 x 184,576 + norm 128 + head 65,536) over 2 ranks, one
    # sub-group of the default 1e9 elements
    (["zero=stage3", "offload=cpu", "offload.ratio=0.5"], "offload.ratio=0.5 moves whole optimizer sub-groups: each "
     "rank's 434,752 trainable parameters in sub-groups of zero.sub_group_size=1000000000 would offload 100% of the "
     "optimizer, not 50%. Set zero.sub_group_size=43476 (about ten sub-groups per rank), or offload.ratio=1."),
    # sp=ulysses over both ranks: ZeRO still partitions over both (the planner's split), 434,752 each
    (["zero=stage3", "offload=cpu", "offload.ratio=0.5", "sp=ulysses", "sp.size=2"], "each rank's 434,752 trainable "
     "parameters in sub-groups of zero.sub_group_size=1000000000 would offload 100% of the optimizer, not 50%. Set "
     "zero.sub_group_size=43476 (about ten sub-groups per rank)"),
])
def test_offload_ratio_refused_where_deepspeed_would_refuse_or_drop_it(overrides, message, compose_cfg):
    assert message in refusal(compose_cfg, overrides)


def test_deepspeed_itself_refuses_a_ratio_below_stage3(compose_cfg, monkeypatch):
    """The stage rule is DeepSpeed's (zero/config.py offload_ratio_check), not only trl_ds's."""
    ds = built(compose_cfg, ["zero=stage2", "offload=cpu"])
    ds["zero_optimization"]["offload_optimizer"]["ratio"] = 0.5
    with pytest.raises(Exception, match="Partial offloading only supported for ZeRO Stage 3"):
        deepspeed_parse(ds, 2, monkeypatch)


@pytest.mark.parametrize("overrides", [
    [*GPU, "zero=stage2", "offload=cpu", "precision.bf16_master_weights_and_grads=true"],
    [*GPU, "zero=stage3", "offload=cpu", "precision.bf16_master_weights_and_grads=true",
     "precision.bf16_optimizer_states=true"],
    [*GPU, "zero=stage1", "precision.bf16_master_weights_and_grads=true", "precision.bf16_optimizer_states=true"],
])
def test_bf16_options_reach_deepspeeds_bf16_block(overrides, compose_cfg, monkeypatch):
    ds = built(compose_cfg, overrides)
    parsed = deepspeed_parse(ds, 8, monkeypatch).bfloat16_config
    assert parsed.bf16_master_weights_and_grads is True
    assert parsed.bf16_optimizer_states is ("precision.bf16_optimizer_states=true" in overrides)


@pytest.mark.parametrize("overrides,message", [
    (["precision.bf16_optimizer_states=true"], "needs precision=bf16 (precision in force: fp32)"),
    ([*GPU, "zero=stage0", "precision.bf16_master_weights_and_grads=true", "precision.bf16_optimizer_states=true"],
     "needs a ZeRO stage of 1 to 3 (got zero.stage=0)"),
    ([*GPU, "offload=cpu", "precision.bf16_optimizer_states=true"],
     "precision.bf16_optimizer_states=true needs precision.bf16_master_weights_and_grads=true"),
    ([*GPU, "precision.bf16_master_weights_and_grads=true"],
     "with fp32 optimizer states needs offload.optimizer=cpu (DeepSpeed's CPU Adam keeps them)"),
])
def test_bf16_options_refused_where_deepspeed_refuses(overrides, message, compose_cfg):
    assert message in refusal(compose_cfg, overrides)


@pytest.mark.parametrize("stage,bf16,match", [
    (0, {"bf16_master_weights_and_grads": True}, "only supported with ZeRO Stage 1, 2, or 3"),
    (2, {"bf16_optimizer_states": True}, "requires bf16_master_weights_and_grads"),
])
def test_deepspeed_itself_refuses_those_bf16_combinations(stage, bf16, match, compose_cfg, monkeypatch):
    ds = built(compose_cfg, [*GPU, f"zero=stage{stage}"])
    ds["bf16"].update(bf16)
    with pytest.raises(AssertionError, match=match):
        deepspeed_parse(ds, 8, monkeypatch)


def test_zeropp_parts_one_by_one(compose_cfg, monkeypatch):
    ds = built(compose_cfg, ["cluster=1x8", "zero=stage3", "zero.zero_hpz_partition_size=4",
                             "zero.zero_quantized_nontrainable_weights=true"])
    zero = deepspeed_parse(ds, 8, monkeypatch).zero_config
    assert (zero.zero_hpz_partition_size, zero.zero_quantized_nontrainable_weights) == (4, True)
    assert (zero.zero_quantized_weights, zero.zero_quantized_gradients) == (False, False)
    allpp = built(compose_cfg, ["cluster=1x8", "zero=stage3", "zero.zeropp=true"])["zero_optimization"]
    assert (allpp["zero_hpz_partition_size"], allpp["zero_quantized_weights"], allpp["zero_quantized_gradients"]) == (
        8, True, True)


@pytest.mark.parametrize("overrides,message", [
    (["cluster=1x8", "zero=stage2", "zero.zero_quantized_gradients=true"],
     "zero.zero_quantized_gradients=true need zero=stage3 (got zero.stage=2)"),
    (["zero=stage3", "zero.zero_quantized_weights=true"], "quantize with CUDA kernels, and cluster.device=cpu here"),
    (["cluster=1x8", "zero=stage3", "zero.zero_hpz_partition_size=3"], "must divide the world of 8 ranks"),
])
def test_zeropp_parts_checked_against_stage_and_device(overrides, message, compose_cfg):
    assert message in refusal(compose_cfg, overrides)


def test_zenflow_by_deepspeeds_names(compose_cfg, monkeypatch):
    ds = built(compose_cfg, ["zero=stage2", "offload=cpu", "zero.zenflow={topk_ratio:0.05,update_interval:4}"])
    zenflow = deepspeed_parse(ds, 2, monkeypatch).zero_config.zenflow
    assert (zenflow.topk_ratio, zenflow.update_interval) == (0.05, 4)
    assert built(compose_cfg, ["zero=stage2", "offload=cpu", "zero.zenflow={}"])["zero_optimization"]["zenflow"] == {}


@pytest.mark.parametrize("overrides,message", [
    (["zero=stage2", "zero.zenflow={}"], "zero.zenflow={} needs offload.optimizer=cpu"),
    (["zero=stage2", "offload=cpu", "zero.zenflow={topk_ration:0.1}"], "Did you mean zero.zenflow.topk_ratio?"),
    (["zero=stage2", "offload=cpu", "zero.zenflow={topk_ratio:1.5}"],
     "zero.zenflow.topk_ratio=1.5: DeepSpeed 0.19.8 refuses it (DeepSpeedZeroConfig: Input should be less than 1"),
    # the stage-3 path transposes the weights of a model transformers partitioned already (zenflow/engine_stage3.py)
    (["zero=stage3", "offload=cpu", "zero.zenflow={}"], "zero.zenflow={} needs offload.optimizer=cpu with "
     "zero=stage1 or stage2 (got zero.stage=3, offload.optimizer=cpu): DeepSpeed's ZenFlow at ZeRO-3 transposes the "
     "weights of a model that transformers has already partitioned, so the first forward fails. Use zero=stage2 "
     "offload=cpu."),
    (["zero=stage0", "offload=cpu", "zero.zenflow={}"], "(got zero.stage=0, offload.optimizer=cpu). Use zero=stage2 "
     "offload=cpu."),
])
def test_zenflow_refused_where_deepspeed_refuses(overrides, message, compose_cfg):
    assert message in refusal(compose_cfg, overrides)
