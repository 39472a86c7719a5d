"""Every cross-group rule, pinned by its message; all problems are reported at once."""
import pytest

from trl_ds.check import validate as validate_mod
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError


def problems_of(cfg, launching=False, run_dir="/tmp/run"):
    with pytest.raises(ConfigError) as err:
        validate(cfg, run_dir, launching)
    return err.value.problems


def test_default_config_is_valid(compose_cfg):
    batch = validate(compose_cfg(), "/tmp/run", launching=False)
    assert (batch.micro, batch.world, batch.accumulation) == (2, 2, 1)


def test_param_offload_needs_stage3(compose_cfg):
    cfg = compose_cfg(["zero=stage2", "offload.param=cpu"])
    assert problems_of(cfg) == ["offload.param=cpu needs zero=stage3 (got zero.stage=2); DeepSpeed would silently "
                                "ignore it. Use zero=stage3 or offload.param=none."]


def test_nvme_needs_stage3(compose_cfg):
    found = problems_of(compose_cfg(["zero=stage2", "offload=nvme"]))
    assert "offload.optimizer=nvme needs zero=stage3 (got zero.stage=2). Use zero=stage3 or offload.optimizer=cpu." \
        in found
    assert any(p.startswith("offload.param=nvme needs zero=stage3") for p in found)


def test_optimizer_offload_needs_a_zero_stage(compose_cfg):
    assert problems_of(compose_cfg(["zero=stage0", "offload=cpu"])) == [
        "offload.optimizer=cpu needs a ZeRO stage of 1 or more (got zero.stage=0). Use zero=stage2 or offload=none."]


def test_stage_out_of_range(compose_cfg):
    assert problems_of(compose_cfg(["zero.stage=5"])) == [
        "zero.stage=5 is not a ZeRO stage. Use zero=stage0, stage1, stage2 or stage3."]


def test_half_precision_on_cpu(compose_cfg):
    assert problems_of(compose_cfg(["precision=bf16"])) == [
        "precision=bf16 needs a GPU cluster (cluster.device=cpu here); trl_ds trains CPU runs in fp32. "
        "Use precision=fp32 (or precision=auto) or a GPU cluster such as cluster=1x8."]


def test_auto_precision_is_bf16_on_gpu_clusters(compose_cfg):
    from trl_ds.config.values import dtype
    assert dtype(compose_cfg(["cluster=1x8"])) == "bf16"
    assert dtype(compose_cfg()) == "fp32"


def test_node_rank_within_nodes(compose_cfg):
    assert problems_of(compose_cfg(["cluster=2x8", "cluster.node_rank=2"])) == [
        "cluster.node_rank=2 is outside 0..1 for cluster.nodes=2. Use cluster.node_rank=0 to 1."]


def test_all_problems_at_once(compose_cfg):
    cfg = compose_cfg(["zero=stage1", "offload.param=cpu", "precision=fp16", "batch.global_size=7",
                       "trainer.max_steps=0"])
    found = problems_of(cfg)
    assert len(found) == 4
    assert [p.split("=")[0] for p in found] == ["offload.param", "precision", "trainer.max_steps", "batch.global_size"]
    with pytest.raises(ConfigError, match=r"^4 problems in the config:\n  - offload.param=cpu"):
        validate(cfg, "/tmp/run", False)


def test_gpus_checked_only_when_launching(compose_cfg, monkeypatch):
    monkeypatch.setattr(validate_mod, "count_gpus", lambda: 0)
    cfg = compose_cfg(["cluster=1x8"])
    validate(cfg, "/tmp/run", launching=False)  # a dry run on a laptop is fine
    assert problems_of(cfg, launching=True) == [
        "cluster=1x8 asks for 8 GPUs per node (cluster.gpus_per_node=8) but this machine has 0. Use dry_run=true to "
        "write the run dir only, cluster.gpus_per_node=1 on a GPU machine, or cluster=local to train on CPU."]


def test_nvme_path_must_be_writable(compose_cfg, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    cfg = compose_cfg(["zero=stage3", "offload=nvme", f"offload.nvme_path={blocked}/swap"])
    found = problems_of(cfg, launching=True)
    assert found[0] == (f"offload.nvme_path={blocked}/swap is not writable ({blocked} is not a writable folder). "
                        f"Set offload.nvme_path to a folder on a local NVMe drive that you can write.")


def test_libaio_missing_says_how_to_install(compose_cfg, monkeypatch, tmp_path):
    monkeypatch.setattr(validate_mod, "LIBAIO_HEADER", str(tmp_path / "absent.h"))
    found = problems_of(compose_cfg(["zero=stage3", "offload=nvme"]), launching=True, run_dir=str(tmp_path))
    assert found == ["offload=nvme needs libaio for DeepSpeed's async_io op, and it is not installed here. "
                     "Install it with: apt-get install -y libaio-dev (or use offload=cpu)."]


def test_missing_local_dataset_and_model(compose_cfg, tmp_path):
    cfg = compose_cfg([f"trainer.dataset_name={tmp_path}/none.jsonl", f"model.name_or_path={tmp_path}"])
    assert problems_of(cfg, launching=True) == [
        f"model.name_or_path={tmp_path} is not a model folder (no config.json there). Give a folder written by "
        f"save_pretrained, or a hub id such as model.name_or_path=Qwen/Qwen2.5-0.5B.",
        f"trainer.dataset_name={tmp_path}/none.jsonl does not exist. Give an existing .jsonl/.json/.parquet file, "
        f"a hub dataset name, or trainer.dataset_name=tiny."]


def test_model_heads_must_divide(compose_cfg):
    assert problems_of(compose_cfg(["model.num_key_value_heads=3"])) == [
        "model.hidden_size=128, num_attention_heads=4 and num_key_value_heads=3 must divide evenly (hidden by heads, "
        "heads by kv heads)."]


def test_zero3_final_save_must_gather(compose_cfg):
    assert problems_of(compose_cfg(["zero=stage3", "zero.stage3_gather_16bit_weights_on_model_save=false"])) == [
        "save_final_model=true with zero=stage3 needs zero.stage3_gather_16bit_weights_on_model_save=true, or each "
        "rank saves only its partition. Set it to true, or save_final_model=false."]
