"""The trainer-aware estimate against the real engines: DPO, reward, GRPO, KTO and RLOO on 2 CPU ranks (fp32), ZeRO-2
and 3.

Each run's worker counts the bytes its engines' tensors hold after training (memory/rank_K.json, see
trl_ds/worker/measure.py): the policy's model states, and apart from them the reference engine TRL built with
prepare_deepspeed. plan.json in the same run dir holds what the app planned before launching. They must agree within
1% on every rank; the parameter count the engine reports (the reward model: a real sequence classifier) must equal
the plan's exactly. The expected reference size is also derived from the engine alone: 4 bytes (fp32) per
parameter on every rank below ZeRO-3, the same bytes as the policy's parameters under it.

The runs of test_trainers.py (dpo-stage3, reward-stage3, grpo-stage3 with beta 0.1, kto-stage2, and
rloo-script-stage3-larger: TRL's rloo.py with the preset's beta 0.05) are shared within a session; dpo-lora-stage3 is
this module's own, one optimizer step (it keeps no reference). ZeRO-3 runs with a reference take two or more steps:
the plan holds the steady state, where the reference keeps its parameters below the persistence threshold whole,
and DeepSpeed releases them after the first forward of an engine (it is still recording its trace then:
partitioned_param_coordinator.py release_sub_module).

One run per reference rule, not per trainer × stage: the planner's reference bytes (plan/trainers.py
reference_places) depend on the stage, the threshold and the offload, never on the trainer, which only decides
whether there is a reference (keeps_reference); and every trainer builds it with the same prepare_deepspeed. So a
whole copy below ZeRO-3 is weighed on KTO (and on TRL's rloo.py at ZeRO-2, test_user_script.py), a partition with
every tensor whole on DPO and GRPO, a partition with large tensors split on RLOO's 12.3M model; no reference on the
reward model and on DPO with LoRA.
"""
import pytest
from conftest import read_json, run_app
from test_trainers import train

pytestmark = pytest.mark.integration

KINDS = ("params", "gradients", "optimizer")
FP32 = 4
OWN = {"dpo-lora-stage3": ["trainer=dpo", "zero=stage3", "peft=lora", "trainer.max_steps=1"]}
SHARED = ("dpo-stage3", "reward-stage3", "grpo-stage3", "kto-stage2", "rloo-script-stage3-larger")  # test_trainers'
_runs = {}


def run(name, tmp_path_factory):
    """The run dir of a case, trained on first use."""
    if name in SHARED:
        return train(name, tmp_path_factory)[0]
    if name not in _runs:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        out = run_app(OWN[name], run_dir)
        assert out.returncode == 0, f"{name}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        _runs[name] = run_dir
    return _runs[name]


def measured(run_dir):
    return [read_json(run_dir / "memory" / f"rank_{r}.json") for r in (0, 1)]


@pytest.mark.parametrize("name", [*SHARED, *OWN])
def test_model_states_and_reference_match_the_plan(name, tmp_path_factory):
    run_dir = run(name, tmp_path_factory)
    plan = read_json(run_dir / "plan.json")
    current = plan["current"]
    planned = {k: sum(v.values()) for k, v in current["after_step_bytes"].items()}
    planned_reference = sum(current["reference_after_step_bytes"].values())
    total = sum(planned.values())
    for rank in measured(run_dir):
        assert rank["parameters"] == plan["parameters"]  # exact: the reward model is counted as a classifier
        held = {k: sum(v.values()) for k, v in rank["model_states"].items()}
        for kind in KINDS:
            assert held[kind] == pytest.approx(planned.get(kind, 0), rel=0.01, abs=0.01 * total), (kind, held)
        reference = sum(rank["reference"].values())
        assert reference == pytest.approx(planned_reference, rel=0.01), (rank["reference"], planned_reference)


@pytest.mark.parametrize("name", ["kto-stage2", "dpo-stage3", "grpo-stage3", "rloo-script-stage3-larger"])
def test_the_reference_is_a_copy_below_zero3_and_a_partition_under_it(name, tmp_path_factory):
    """From the engine alone: below ZeRO-3 prepare_deepspeed sets stage 0, so every rank holds all parameters in the
    policy's dtype; under ZeRO-3 the reference is partitioned exactly as the policy's parameters are."""
    for rank in measured(run(name, tmp_path_factory)):
        reference = sum(rank["reference"].values())
        if "stage2" in name:
            assert reference == FP32 * rank["parameters"]
        else:  # the tiny model's tensors are all below the threshold: whole, beside their partitions
            assert reference == sum(rank["model_states"]["params"].values())
            if "larger" in name:  # its large tensors are partitioned: less than a whole fp32 copy
                assert reference < FP32 * rank["parameters"]


@pytest.mark.parametrize("name", ["reward-stage3", "dpo-lora-stage3"])
def test_no_reference_is_kept(name, tmp_path_factory):
    """The reward trainer has none; with PEFT TRL builds none (precompute_ref_log_probs: planned 0, not run here)."""
    run_dir = run(name, tmp_path_factory)
    assert read_json(run_dir / "plan.json")["current"]["device_bytes"]["reference"] == 0
    for rank in measured(run_dir):
        assert rank["reference"] == {}


@pytest.mark.parametrize("name", ["kto-stage2", "rloo-script-stage3-larger"])
def test_kto_and_rloo_reference_bytes_are_the_plans_exactly(name, tmp_path_factory):
    """KTO's reference as DPO's (a whole fp32 copy at ZeRO-2), RLOO's as GRPO's (a ZeRO-3 partition plus the norms,
    which stay whole): the plan's bytes per place are the engine's, to the byte. The RLOO run is TRL's own rloo.py:
    the script's trainer is weighed as the worker's is."""
    run_dir = run(name, tmp_path_factory)
    planned = read_json(run_dir / "plan.json")["current"]["reference_after_step_bytes"]
    for rank in measured(run_dir):
        assert {"cpu" if k == "device" else k: v for k, v in planned.items()} == rank["reference"]
