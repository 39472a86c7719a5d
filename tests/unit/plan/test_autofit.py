"""trl_ds/plan/autofit.py: `zero=auto offload=auto` resolves to the fastest configuration that fits, deterministically,
and the run it writes is the one the typed winner writes."""
import pytest
from conftest import read_json, run_app

from trl_ds.cli.app import build
from trl_ds.config.values import value
from trl_ds.errors import ConfigError
from trl_ds.plan.autofit import candidates, resolve
from trl_ds.plan.grid import OFFLOADS

ARGS_70B = ["model=llama3-70b", "cluster=1x8", "trainer.max_length=2048", "trainer.gradient_checkpointing=true",
            "trainer.per_device_train_batch_size=1"]


def test_the_winner_is_the_least_time_per_sample_that_fits(compose_cfg):
    # 48 GiB: the three ZeRO-3 offloads fit, the rest do not (at 40 GiB none fits since the GPU check, docs/gpu.md)
    cfg = compose_cfg(["model=llama3-8b", "cluster=1x8", "cluster.gpu_memory_gb=48", "zero=auto", "offload=auto",
                       "batch.global_size=64", "trainer.max_length=2048"])
    ranked = candidates(cfg)
    # stage 0: none; 1-2: none, opt-cpu; 3: the four offloads and opt-cpu at the three partial ratios
    assert len(ranked) == 12
    fitting = [c for c in ranked if c.fits]
    assert ranked[:len(fitting)] == fitting  # those that fit come first
    assert [c.time.per_sample for c in fitting] == sorted(c.time.per_sample for c in fitting)
    result = resolve(cfg)
    assert result["winner"]["zero_stage"] == cfg.zero.stage == fitting[0].estimate.setup.stage
    assert (cfg.offload.optimizer.value, cfg.offload.param.value) == OFFLOADS[result["winner"]["offload"]]
    assert (cfg.zero.auto, cfg.offload.auto, result["choices"]) == (False, False, ["zero", "offload"])
    assert result["reason"].startswith(f"least estimated time per sample of the {len(fitting)} that fit; ")


def test_it_is_deterministic(compose_cfg):
    args = ["model=llama3-8b", "cluster=2x8", "zero=auto", "offload=auto"]
    assert resolve(compose_cfg(args))["ranking"] == resolve(compose_cfg(args))["ranking"]


def test_only_the_auto_choice_varies(compose_cfg):
    cfg = compose_cfg(["model=llama3-8b", "cluster=1x8", "zero=stage3", "offload=auto"])
    ranked = candidates(cfg)
    assert {c.estimate.setup.stage for c in ranked} == {3} and len(ranked) == 4 + 3  # opt-cpu's 3 partial ratios
    assert resolve(compose_cfg(["zero=stage2"])) is None  # nothing auto: nothing changes


def test_70b_on_one_node_needs_nvme(compose_cfg):
    cfg = compose_cfg(ARGS_70B + ["zero=auto", "offload=auto"])
    result = resolve(cfg)
    assert (cfg.zero.stage, cfg.offload.optimizer.value, cfg.offload.param.value) == (3, "nvme", "nvme")
    # ZeRO-2 without offload is faster than ZeRO-3 (its per-module cost, zero3_us_per_module); neither fits
    assert "faster but does not fit: zero=stage2 offload=none, zero=stage3 offload=none" in result["reason"]


def test_nothing_fits_is_one_error_with_the_fix(compose_cfg):
    cfg = compose_cfg(["model=llama3-70b", "cluster=1x8", "trainer.max_length=2048", "zero=auto", "offload=auto"])
    with pytest.raises(ConfigError, match=r"zero=auto, offload=auto: none of the 12 candidates fits on cluster=1x8. "
                                          r"The smallest is zero=stage3 offload=opt\+param-cpu at 166.6 GiB per rank"):
        build(cfg, "/tmp/run", launching=False)


def test_the_run_dir_is_the_typed_winners(tmp_path):
    auto = run_app(ARGS_70B + ["zero=auto", "offload=auto", "dry_run=true"], tmp_path / "auto")
    assert auto.returncode == 0, auto.stderr
    assert "trl_ds auto-fit" in auto.stdout and "  chosen: zero=stage3 offload=nvme" in auto.stdout
    typed = run_app(ARGS_70B + ["zero=stage3", "offload=nvme", "dry_run=true"], tmp_path / "typed")
    assert typed.returncode == 0, typed.stderr
    ds = [read_json(tmp_path / d / "ds_config.json") for d in ("auto", "typed")]
    nvme = [c["zero_optimization"][k].pop("nvme_path") for c in ds for k in ("offload_optimizer", "offload_param")]
    assert ds[0] == ds[1] and all(p.endswith("nvme") for p in nvme)
    plan = read_json(tmp_path / "auto" / "plan.json")
    assert plan["autofit"]["winner"]["zero_stage"] == 3 and plan["autofit"]["winner"]["offload"] == "nvme"
    assert len(plan["autofit"]["ranking"]) == 12 and plan["recommendation"]["step_seconds"] > 0


def test_micro_batch_and_checkpointing_auto_vary_at_the_fixed_global_batch(compose_cfg):
    cfg = compose_cfg(["model=llama3-70b", "cluster=1x8", "trainer.max_length=4096", "batch.global_size=64",
                       "zero=auto", "offload=auto", "trainer.per_device_train_batch_size=auto",
                       "trainer.gradient_checkpointing=auto"])
    ranked = candidates(cfg)
    # pairs and ratios × micro-batches dividing 64 over 8 ranks (1, 2, 4, 8) × checkpointing
    assert len(ranked) == 12 * 4 * 2
    result = resolve(cfg)
    assert result["choices"] == ["zero", "offload", "trainer.per_device_train_batch_size",
                                 "trainer.gradient_checkpointing"]
    winner = result["winner"]
    assert (cfg.trainer.per_device_train_batch_size, cfg.trainer.gradient_checkpointing) == \
        (winner["micro_batch"], winner["gradient_checkpointing"])
    fitting = [r for r in result["ranking"] if r["verdict"] == "fits"]
    assert winner == fitting[0] and winner["seconds_per_sample"] == min(r["seconds_per_sample"] for r in fitting)
    assert winner["gradient_checkpointing"] is True  # 4096 tokens of 70B activations need it on 80 GB
    assert f"chosen: zero=stage{winner['zero_stage']} offload={winner['offload']} micro={winner['micro_batch']} " \
           f"ckpt=yes" in result["text"]


def test_auto_micro_batch_needs_a_global_batch(compose_cfg):
    with pytest.raises(ConfigError, match=r"trainer.per_device_train_batch_size=auto holds the global batch fixed "
                                          r"while it varies the micro-batch: set batch.global_size"):
        resolve(compose_cfg(["trainer.per_device_train_batch_size=auto"]))
    with pytest.raises(ConfigError, match=r"drop trainer.gradient_accumulation_steps=2"):
        resolve(compose_cfg(["trainer.per_device_train_batch_size=auto", "batch.global_size=8",
                             "trainer.gradient_accumulation_steps=2"]))


@pytest.mark.parametrize("override, message", [
    ("trainer.per_device_train_batch_size=abc", "trainer.per_device_train_batch_size=abc must be a positive integer "
                                                "or auto."),
    ("trainer.gradient_checkpointing=maybe", "trainer.gradient_checkpointing=maybe must be true, false or auto."),
])
def test_a_value_that_is_neither_auto_nor_its_type_is_refused(override, message, tmp_path):
    out = run_app([override, "dry_run=true"], tmp_path / "run")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_the_winner_is_one_the_launch_accepts(compose_cfg, tmp_path):
    """zero.zenflow needs the optimizer on the CPU at ZeRO-1 or 2 (check/deepspeed_features.py): auto-fit chose
    ZeRO-2 without offload, the fastest that fits, and the launch then refused its own choice."""
    cfg = compose_cfg(["model=llama3-8b", "cluster=1x8", "zero=auto", "offload=auto", "zero.zenflow={}"])
    build(cfg, str(tmp_path), launching=False)
    assert cfg.zero.stage in (1, 2) and value(cfg.offload.optimizer) == "cpu", (cfg.zero.stage, cfg.offload.optimizer)
