"""Nothing silent (#31): a key added with + to any group lands in the file it belongs to or is refused before launch,
naming the closest real key; DeepSpeed's own names pass through zero.*, offload.* and deepspeed.*, and DeepSpeed's
own classes judge the result."""
import dataclasses
import subprocess
import sys
import time

import pytest

from trl_ds.check.deepspeed_keys import schema_paths
from trl_ds.check.validate import validate
from trl_ds.config.values import schema_type
from trl_ds.errors import ConfigError
from trl_ds.rundir.deepspeed_config import build_ds_config


def refusal(compose_cfg, overrides) -> str:
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(overrides), "/tmp/run", launching=False)
    return str(err.value)


def built(compose_cfg, overrides) -> dict:
    cfg = compose_cfg(overrides)
    return build_ds_config(cfg, validate(cfg, "/tmp/run", launching=False), "/tmp/run")


def deepspeed_parse(ds_config, world, monkeypatch):
    """DeepSpeed's own DeepSpeedConfig for `world` ranks (it asks a process group otherwise)."""
    import deepspeed.runtime.config as ds_runtime_config

    monkeypatch.setattr(ds_runtime_config, "dist", type("World", (), {
        "get_rank": staticmethod(lambda: 0), "get_world_size": staticmethod(lambda group=None: world)})())
    return ds_runtime_config.DeepSpeedConfig(ds_config)


@pytest.mark.parametrize("override,message", [
    ("+zero.overlap_comms=true", "zero.overlap_comms=true: zero has no key overlap_comms (checked: trl_ds's keys and "
                                 "DeepSpeed's zero_optimization). Did you mean zero.overlap_comm?"),
    ("+cluster.gpu_memory=24", "cluster.gpu_memory=24: cluster has no key gpu_memory. Did you mean "
                               "cluster.gpu_memory_gb?"),
    ("+offload.pin_memroy=false", "Did you mean offload.pin_memory?"),
    ("+trainer.maxsteps=3", "Did you mean trainer.max_steps?"),
    ("+launcher.slurm.partiton=gpu", "Did you mean launcher.slurm.partition?"),
    ("+cluster.hardware.peak_tflop=1", "Did you mean cluster.hardware.peak_tflops?"),
    ("+seeds=1", "seeds=1: the config has no key seeds. Did you mean seed?"),
])
def test_the_issues_typos_are_refused_with_the_real_name(override, message, compose_cfg):
    assert message in refusal(compose_cfg, [override])


def test_every_group_refuses_an_added_key(compose_cfg):
    """One misspelling per schema node (every group and nested block), all refused at once, each naming its key."""
    paths = list(schema_paths(""))
    assert {"zero", "offload", "offload.aio", "cluster", "cluster.hardware", "launcher.slurm", "sp"} <= set(paths)
    overrides = []
    for path in paths:
        name = dataclasses.fields(schema_type(path))[0].name
        overrides.append(f"+{path + '.' if path else ''}{name}x=1")
    text = refusal(compose_cfg, overrides)
    assert f"{len(overrides)} problems in the config" in text
    for override in overrides:
        key = override[1:].split("=")[0]
        assert f"{key}=1: " in text and f"Did you mean {key[:-1]}?" in text, key


def test_a_typo_is_refused_without_importing_deepspeed():
    """Names come from DeepSpeed's source read with ast: the refusal does not pay the ~2 s deepspeed import."""
    code = ("import sys\n"
            "from trl_ds.config.compose import compose\nfrom trl_ds.check.validate import validate\n"
            "from trl_ds.errors import ConfigError\n"
            "try:\n    validate(compose(['+zero.overlap_comms=true']), '/tmp/run', False)\n"
            "except ConfigError as err:\n    print(err)\n"
            "print('deepspeed' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Did you mean zero.overlap_comm?" in out
    assert out.split()[-2:] == ["False", "False"], out


def test_refusal_latency_in_process(compose_cfg):
    """CPU seconds, not wall time: the machine running the tests may be shared."""
    compose_cfg([])  # Hydra's first composition in this process
    started = time.process_time()
    refusal(compose_cfg, ["+zero.overlap_comms=true", "+cluster.gpu_memory=24"])
    assert time.process_time() - started < 1.0


def test_a_zero_key_is_written_at_stage_0_too(compose_cfg):
    assert built(compose_cfg, ["zero=stage0", "+zero.allgather_partitions=false"])["zero_optimization"] == {
        "stage": 0, "allgather_partitions": False}


def test_free_form_maps_keep_their_own_checks(compose_cfg):
    cfg = compose_cfg(["+cluster.env.NCCL_DEBUG=WARN", "+launcher.env.MY_FLAG=1", "+trainer.args.packing=true",
                       "+model.extra.rope_theta=10000.0"])
    validate(cfg, "/tmp/run", launching=False)


def test_zero_and_offload_keys_by_deepspeeds_names_reach_ds_config(compose_cfg, monkeypatch):
    ds = built(compose_cfg, ["zero=stage3", "offload=cpu", "+zero.use_multi_rank_bucket_allreduce=false",
                             "+zero.allgather_partitions=false", "+offload.pipeline_read=true",
                             "+deepspeed.wall_clock_breakdown=true", "+deepspeed.flops_profiler.enabled=true"])
    zero = ds["zero_optimization"]
    assert zero["use_multi_rank_bucket_allreduce"] is False and zero["allgather_partitions"] is False
    assert zero["offload_optimizer"]["pipeline_read"] is True and ds["wall_clock_breakdown"] is True
    parsed = deepspeed_parse(ds, 2, monkeypatch)  # DeepSpeed reads each one by its own name
    assert parsed.zero_config.use_multi_rank_bucket_allreduce is False
    assert parsed.zero_config.allgather_partitions is False
    assert parsed.zero_config.offload_optimizer.pipeline_read is True
    assert parsed.wall_clock_breakdown is True and parsed.flops_profiler_config.enabled is True


@pytest.mark.parametrize("overrides,message", [
    (["+deepspeed.wall_clok_breakdown=true"], "deepspeed.wall_clok_breakdown=true: DeepSpeed 0.19.8 never reads "
                                              "wall_clok_breakdown (it would be ignored). Did you mean "
                                              "deepspeed.wall_clock_breakdown?"),
    (["+deepspeed.flops_profiler.enabeld=true"], "Did you mean deepspeed.flops_profiler.enabled?"),
    (["+deepspeed.tensorboard.enabeld=true"], "deepspeed.tensorboard.enabeld=true: DeepSpeed 0.19.8 refuses it "
                                              "(DeepSpeedMonitorConfig: Extra inputs are not permitted)"),
    (["zero=stage3", "+zero.use_multi_rank_bucket_allreduce=maybe"],
     "zero.use_multi_rank_bucket_allreduce=maybe: DeepSpeed 0.19.8 refuses it (DeepSpeedZeroConfig: Input should be "
     "a valid boolean"),
    (["zero=stage3", "offload=cpu", "+offload.cpuadam_cores_perc=2"], "offload.cpuadam_cores_perc=2: DeepSpeed "
                                                                       "0.19.8 refuses it"),
    # a number where DeepSpeed reads a block: its own AttributeError, one line instead of a traceback
    (["+deepspeed.flops_profiler=5"], "DeepSpeed 0.19.8 refuses ds_config.json: AttributeError: 'int' object has no "
                                      "attribute 'get' (the last key it read: flops_profiler)."),
])
def test_deepspeeds_own_classes_refuse_before_launch(overrides, message, compose_cfg):
    assert message in refusal(compose_cfg, overrides)


@pytest.mark.parametrize("override,message", [
    ("+deepspeed.train_batch_size=64", "trl_ds writes train_batch_size into ds_config.json itself. Use "
                                       "batch.global_size instead."),
    ("+deepspeed.zero_optimization.stage=3", "Use zero.NAME"),
    ("+deepspeed.bf16.enabled=true", "Use precision=bf16"),
    ("+deepspeed.tensor_parallel.autotp_size=2", "Use tp=autotp tp.size=N"),
    ("+zero.offload_optimizer.device=cpu", "trl_ds writes zero_optimization.offload_optimizer itself. Use "
                                           "offload.optimizer=cpu|nvme"),
    ("+zero.cpu_offload=true", "zero.cpu_offload=true: DeepSpeed deprecates cpu_offload (use offload_optimizer). "
                               "Use offload.optimizer=cpu instead."),
    ("+zero.prefetch_bucket_size=1000", "prefetch_bucket_size and stage3_prefetch_bucket_size are one DeepSpeed "
                                        "field, which trl_ds names stage3_prefetch_bucket_size."),
    ("+offload.device=cpu", "Use offload.optimizer=cpu|nvme or offload.param=cpu|nvme instead."),
    ("+offload.pipeline_read=true", "offload.pipeline_read=true is a key of DeepSpeed's offload_optimizer, and "
                                    "offload.optimizer=none here: nothing would read it."),
])
def test_keys_trl_ds_derives_are_refused_naming_its_key(override, message, compose_cfg):
    assert message in refusal(compose_cfg, [override])


def test_every_entry_point_refuses_through_compose():
    """compose() (trl-ds plan, export, doctor, fit) refuses what validate() refuses for `trl-ds run`."""
    from trl_ds.config.compose import compose

    with pytest.raises(ConfigError, match=r"Did you mean cluster\.gpu_memory_gb\?"):
        compose(["+cluster.gpu_memory=24"])
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli", "plan", "+zero.overlap_comms=true"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Did you mean zero.overlap_comm?" in out.stdout + out.stderr


def test_shipped_top_level_names_are_what_deepspeed_reads(compose_cfg):
    """The names a misspelt deepspeed.NAME is compared with, at once, are those the installed DeepSpeed's
    DeepSpeedConfig looks up (recorded); a DeepSpeed upgrade that reads others fails here."""
    from trl_ds.check.deepspeed_verdict import judge
    from trl_ds.config.deepspeed_names import TOP_LEVEL_NAMES, TOP_LEVEL_VERSION, deepspeed_version

    assert deepspeed_version() == TOP_LEVEL_VERSION, "record TOP_LEVEL_NAMES for the installed DeepSpeed"
    error, read = judge(built(compose_cfg, []), 2)
    assert error is None and {name for name in read if "." not in name} == TOP_LEVEL_NAMES


def test_a_misspelt_top_level_block_is_refused_without_importing_deepspeed():
    code = ("import sys\nfrom trl_ds.config.compose import compose\nfrom trl_ds.check.validate import validate\n"
            "from trl_ds.errors import ConfigError\n"
            "try:\n    validate(compose(['+deepspeed.wall_clok_breakdown=true']), '/tmp/run', False)\n"
            "except ConfigError as err:\n    print(err)\nprint('deepspeed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Did you mean deepspeed.wall_clock_breakdown?" in out and out.split()[-1] == "False", out
