"""A misspelt key is answered with its real name whether it was given with `+` or not (#41): one line, exit 2, never
Hydra's "To append to your config use +KEY=VALUE", which advises adding a key that does not exist."""
import subprocess
import sys

import pytest

from tests.unit.check.test_trainer_rules import problems
from trl_ds.errors import ConfigError
from trl_ds.rundir.deepspeed_config import build_ds_config

# The real names are the schema's (trl_ds/config/schema.py) and DeepSpeed's; the wording is pinned by hand.
ANSWERS = [
    ("zero.overlap_comms=true", "zero.overlap_comms=true: zero has no key overlap_comms (checked: trl_ds's keys and "
                                "DeepSpeed's zero_optimization). Did you mean zero.overlap_comm?"),
    ("offload.optimzer=cpu", "offload.optimzer=cpu: offload has no key optimzer (checked: trl_ds's keys and "
                             "DeepSpeed's offload_optimizer / offload_param). Did you mean offload.optimizer?"),
    ("dry_rn=true", "dry_rn=true: the config has no key dry_rn. Did you mean dry_run?"),
    ("zerro=stage3", "zerro=stage3: the config has no key zerro. Did you mean zero?"),
    ("trainer.per_device_train_batch_siz=2", "trainer.per_device_train_batch_siz=2: trainer has no key "
                                             "per_device_train_batch_siz. Did you mean "
                                             "trainer.per_device_train_batch_size?"),
    ("cluster.hardware.peak_tflop=1", "cluster.hardware.peak_tflop=1: cluster.hardware has no key peak_tflop. "
                                      "Did you mean cluster.hardware.peak_tflops?"),
    ("launcher.slurm.partiton=gpu", "launcher.slurm.partiton=gpu: launcher.slurm has no key partiton. "
                                    "Did you mean launcher.slurm.partition?"),
    ("offload.aio.block_siz=1", "offload.aio.block_siz=1: offload.aio has no key block_siz. "
                                "Did you mean offload.aio.block_size?"),
    ("cluster.hardwar.peak_tflops=1", "cluster.hardwar={peak_tflops:1}: cluster has no key hardwar. "
                                      "Did you mean cluster.hardware?"),
    ("trainer.qwertyuiop=1", "trainer.qwertyuiop=1: trainer has no key qwertyuiop. Remove it; "
                             "`python -m trl_ds --cfg job` shows every key of trainer."),
    ("zero.qwertyuiop=1", "zero.qwertyuiop=1: zero has no key qwertyuiop (checked: trl_ds's keys and DeepSpeed's "
                          "zero_optimization). Remove it; `python -m trl_ds --cfg job` shows every key of zero."),
]


@pytest.mark.parametrize("plus", ["", "+"])
@pytest.mark.parametrize("override,answer", ANSWERS)
def test_a_misspelt_key_gets_its_real_name_with_or_without_plus(override, answer, plus, compose_cfg):
    with pytest.raises(ConfigError) as err:
        compose_cfg([plus + override])
    assert err.value.problems == [answer]


@pytest.mark.parametrize("plus", ["", "+"])
def test_a_misspelt_trl_argument_gets_its_real_name_with_or_without_plus(plus, compose_cfg):
    assert problems(compose_cfg, [f"{plus}trainer.args.pakcing=true"]) == [
        "trainer.args.pakcing=true: trainer=sft has no argument pakcing (checked against "
        "ScriptArguments/SFTConfig/ModelConfig). Closest: packing, eval_packing."]


def test_real_names_of_a_passthrough_are_read_alike_with_or_without_plus(compose_cfg):
    """DeepSpeed's and TRL's own names under zero.*, deepspeed.* and trainer.args.*, and free-form maps."""
    given = ["zero.allgather_partitions=false", "deepspeed.wall_clock_breakdown=true", "trainer.args.packing=true",
             "cluster.env.NCCL_DEBUG=WARN", "model.extra.rope_theta=10000.0"]
    plain, added = compose_cfg(given), compose_cfg(["+" + o for o in given])
    assert plain == added
    assert problems(compose_cfg, given) == []
    from trl_ds.check.validate import validate

    ds = build_ds_config(plain, validate(plain, "/tmp/run", launching=False), "/tmp/run")
    assert ds["zero_optimization"]["allgather_partitions"] is False and ds["wall_clock_breakdown"] is True


def test_a_key_a_free_form_map_already_holds_is_overridden(compose_cfg):
    """`+` on a key that is there fails in Hydra ("An item is already at"): the second, plain one must override."""
    cfg = compose_cfg(["+trainer.args.packing=true", "trainer.args.packing=false"])
    assert cfg.trainer.args.packing is False


def test_hydras_advice_to_add_a_plus_never_reaches_the_user(tmp_path):
    """`python -m trl_ds` composes through Hydra's main, not compose(): the same answer there, exit 2, no run dir."""
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "trl_ds", "zero.overlap_comms=true", "offload.optimzer=cpu",
                          f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == ("trl_ds: 2 problems in the config:\n"
                          f"  - {ANSWERS[0][1]}\n"
                          f"  - {ANSWERS[1][1]}\n")
    assert not run_dir.exists()
