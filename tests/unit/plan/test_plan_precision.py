"""The planner with DeepSpeed's partial offload (offload.ratio) and bf16 optimizer options: the model-state columns,
the step time, `trl-ds plan`'s rows and plan.json, and auto-fit's choice of a ratio.

Expected bytes per trainable parameter come from DeepSpeed 0.19.8's source, not from trl_ds:
- default: fp32 master 4 + Adam 8 + fp32 gradient partition 4 (its estimate_zero3_model_states_mem_needs, 16 B);
- bf16_master_weights_and_grads: base_optimizer._configure_master_weights gives bf16 master weights and gradient
  partition (2 + 2); DeepSpeedCPUAdam keeps fp32 moments unless fp32_optimizer_states is off (cpu_adam.py
  state_dtype), so 2 + 8 + 2 = 12 B offloaded;
- with bf16_optimizer_states too: engine.py turns fp32_optimizer_states off: 2 + 4 + 2 = 8 B; on the device the
  moments are zeros_like(the bf16 master weights): 8 B as well.
- offload.ratio: stage3.py _create_fp32_partitions offloads sub-group i when i >= int((1 - ratio) * count).
"""
import json

import pytest

from trl_ds.cli import plan as plan_command
from trl_ds.cli.app import build
from trl_ds.plan import moments, planner
from trl_ds.plan.autofit import resolve
from trl_ds.plan.memory import GiB, estimate, setup_from_config
from trl_ds.plan.steptime import hardware_from_config, step_time

RANKS = 8
L4 = ["model=llama3-8b", "cluster=1x8", "cluster.gpu=l4-24gb", "cluster.gpu_memory_gb=24", "trainer.max_length=2048",
      "trainer.gradient_checkpointing=true", "trainer.per_device_train_batch_size=1"]
STAGE3_CPU = L4 + ["zero=stage3", "offload=cpu"]
TEN_SUB_GROUPS = "zero.sub_group_size=100378266"  # ceil(8,030,261,248 / 8 / 10): ten sub-groups per rank
BF16_MASTER = ["precision.bf16_master_weights_and_grads=true"]
BF16_ALL = BF16_MASTER + ["precision.bf16_optimizer_states=true"]


def plan_of(compose_cfg, args):
    setup = setup_from_config(compose_cfg(args))
    return setup, estimate(setup)


def per_param(nbytes, setup) -> float:
    return nbytes / (setup.trainable / setup.world)


@pytest.mark.parametrize("extra, offloaded_bytes, host_gib", [([], 16, 210.4), (BF16_MASTER, 12, 165.6),
                                                          (BF16_ALL, 8, 120.7)])
def test_offloaded_bytes_per_parameter_are_deepspeeds(compose_cfg, extra, offloaded_bytes, host_gib):
    setup, e = plan_of(compose_cfg, STAGE3_CPU + extra)
    held = e.after_step
    host = held["optimizer"]["host"] + held["gradients"]["host"] - int(setup.width * setup.trainable / RANKS)
    assert per_param(host, setup) == pytest.approx(offloaded_bytes, abs=1e-6)
    assert e.device["optimizer"] == 0  # nothing of the optimizer on the GPU at ratio 1
    # the host column: the offloaded states per rank × 8 ranks × DeepSpeed's 1.5 (the 16-bit gradient partition is
    # a pinned buffer, counted apart)
    states = offloaded_bytes * setup.trainable * 1.5
    assert e.host["model_states"] == pytest.approx(states, rel=1e-6)
    # docs/planner.md's table: the GPU's share does not move, the host's does
    assert (round(e.device_total / GiB, 1), round(e.host_total / GiB, 1)) == (13.0, host_gib)


def test_bf16_states_on_the_device_are_8_bytes(compose_cfg):
    setup, e = plan_of(compose_cfg, L4 + ["zero=stage3", "offload=none"] + BF16_ALL)
    assert per_param(e.after_step["optimizer"]["device"], setup) == pytest.approx(6, abs=1e-6)  # master 2 + Adam 4
    # the optimizer's bf16 gradient partition exists at the step only, one sub-group at a time, and the cast to bf16
    # is the flattened copy itself: 2 B per element of the largest sub-group (trl_ds/plan/moments.py)
    assert moments.step_transient(setup) == 2 * min(setup.sub_group_size, setup.trainable // RANKS)
    # nothing offloaded: DeepSpeed's zero.Init convention loads one module at a time (4 B, each rank, × 1.5)
    assert e.host["model_states"] == int(4 * setup.counts.largest_module * RANKS * 1.5)


def test_half_the_sub_groups_stay_on_the_gpu_at_ratio_half(compose_cfg):
    setup, full = plan_of(compose_cfg, STAGE3_CPU)
    _, half = plan_of(compose_cfg, STAGE3_CPU + ["offload.ratio=0.5", TEN_SUB_GROUPS])
    per_rank = setup.trainable / RANKS
    # 5 of 10 sub-groups on the GPU: fp32 master and Adam (12 B) and the fp32 gradient (4 B) of half the partition
    assert half.device["optimizer"] == pytest.approx(12 * per_rank / 2, rel=1e-6)
    assert half.device["gradients"] - full.device["gradients"] == pytest.approx(4 * per_rank / 2, rel=1e-6)
    assert half.after_step["optimizer"] == pytest.approx({"device": 6 * per_rank, "host": 6 * per_rank}, rel=1e-6)
    off = 16 * per_rank * RANKS * 1.5  # what the full offload keeps on the host per node, × 1.5
    assert full.host["model_states"] - half.host["model_states"] == pytest.approx(off / 2, rel=1e-6)
    # the figures docs/planner.md quotes (GiB): per rank 13.0 -> 22.4, host per node 210.4 -> 120.7
    assert [round(x / GiB, 1) for x in (full.device_total, half.device_total, full.host_total, half.host_total)] == \
        [13.0, 22.4, 210.4, 120.7]


def test_whole_sub_groups_move(compose_cfg):
    """Three sub-groups (the last one smaller) at ratio 0.5: int(0.5 * 3) = 1 stays on the device."""
    setup, e = plan_of(compose_cfg, STAGE3_CPU + ["offload.ratio=0.5", "zero.sub_group_size=400000000",
                                                  "preflight.memory=off"])
    assert e.after_step["optimizer"]["device"] == 12 * 400_000_000


def test_the_optimizer_step_is_split_between_gpu_and_cpu(compose_cfg):
    cfg = compose_cfg(STAGE3_CPU + ["offload.ratio=0.25", TEN_SUB_GROUPS])
    hw, setup = hardware_from_config(cfg), setup_from_config(cfg)
    partial = step_time(setup, hw, 8).terms["optimizer"]
    on_cpu = step_time(setup_from_config(compose_cfg(STAGE3_CPU)), hw, 8).terms["optimizer"]
    on_gpu = step_time(setup_from_config(compose_cfg(L4 + ["zero=stage3", "offload=none"])), hw, 8).terms["optimizer"]
    # int((1 - 0.25) * 10) = 7 sub-groups on the GPU, 3 on the CPU, stepped one after the other
    assert partial == pytest.approx(0.7 * on_gpu + 0.3 * on_cpu, rel=1e-6)


def test_plan_shows_the_ratio_and_its_command_passes_the_checks(compose_cfg, capsys, tmp_path):
    args = STAGE3_CPU + ["offload.ratio=0.5", TEN_SUB_GROUPS]
    assert plan_command.main(args + ["--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["current"]["offload"] == "opt-cpu" and plan["current"]["offload_ratio"] == 0.5
    ratios = {(r["zero_stage"], r["offload"], r["offload_ratio"]) for r in plan["rows"]}
    assert (3, "opt-cpu", 0.5) in ratios and (2, "opt-cpu", 1.0) in ratios  # the ratio applies at ZeRO-3 only
    assert plan_command.main(args) == 0
    assert "  3  opt-cpu@0.5 " in capsys.readouterr().out
    # one row per stage and offload: its command composes and passes trl_ds's checks, ratio or not (the user's
    # ratio is dropped where it does not apply, kept with its sub-group size where it does)
    firsts = {(r["zero_stage"], r["offload"]): r for r in reversed(plan["rows"])}
    for row in firsts.values():
        command = planner.run_command(setup_of(compose_cfg, args, row), args).split()[3:]
        assert ("offload.ratio=0.5" in command) == (row["offload_ratio"] == 0.5), command
        build(compose_cfg(command + ["preflight.memory=off"]), str(tmp_path / "run"), launching=False)


def setup_of(compose_cfg, args, row):
    return setup_from_config(compose_cfg(args + row["overrides"]))


def test_bf16_master_without_bf16_states_plans_only_offloads(compose_cfg, capsys):
    assert plan_command.main(STAGE3_CPU + BF16_MASTER + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["offload_optimizer"] != "none" and r["zero_stage"] > 0 for r in rows)
    assert all(r["precision"]["bf16_master_weights_and_grads"] for r in rows)


def test_autofit_keeps_half_the_optimizer_on_an_l4(compose_cfg, tmp_path):
    """docs/autofit.md's L4 sample: ZeRO-3 with CPU offload fits and the GPU has room for half the optimizer."""
    cfg = compose_cfg(L4 + ["zero=auto", "offload=auto", "batch.global_size=64"])
    result = resolve(cfg)
    assert result["winner"]["offload"] == "opt-cpu" and result["winner"]["offload_ratio"] == 0.5
    assert (cfg.offload.ratio, cfg.zero.sub_group_size) == (0.5, 100378266)
    fitting = [r for r in result["ranking"] if r["verdict"] == "fits"]
    assert [(r["offload"], r["offload_ratio"]) for r in fitting[:3]] == \
        [("opt-cpu", 0.5), ("opt-cpu", 0.75), ("opt-cpu", 1.0)]  # 0.25 does not fit in 24 GiB
    typed = compose_cfg(L4 + ["zero=stage3", "offload=cpu", "offload.ratio=0.5", TEN_SUB_GROUPS,
                              "batch.global_size=64"])
    chosen = build(cfg, str(tmp_path / "auto"), launching=False).ds_config
    assert chosen == build(typed, str(tmp_path / "typed"), launching=False).ds_config
    assert chosen["zero_optimization"]["offload_optimizer"]["ratio"] == 0.5


def test_the_smallest_change_that_fits_drops_a_ratio_that_stops_applying(compose_cfg, tmp_path):
    """On a 16 GiB card only NVMe offload fits; offload.ratio applies to CPU offload only, so the suggestion sets it
    back to 1, and the config it names passes the checks."""
    args = STAGE3_CPU + ["cluster.gpu_memory_gb=16", "offload.ratio=0.25", TEN_SUB_GROUPS]
    cfg = compose_cfg(args)
    message = planner.not_fit_message(cfg, estimate(setup_from_config(cfg)))
    assert "The smallest change that fits: offload=nvme offload.ratio=1 (estimated " in message
    build(compose_cfg(args + ["offload=nvme", "offload.ratio=1"]), str(tmp_path / "run"), launching=False)
