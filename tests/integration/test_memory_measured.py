"""The estimator's model-state bytes against the real engine: 2 CPU ranks, fp32, ZeRO 0-3 × offload none/cpu.

Each run's worker counts, after training, the bytes its engine's tensors hold (memory/rank_K.json, see
trl_ds/worker/measure.py); plan.json in the same run dir holds the estimate the app made before launching. They
must agree within 1% per kind (parameters, gradients, optimizer state) on every rank.

The preflight decides with other numbers: the per-rank columns of the planner's table (plan.json's device_bytes, a
peak during the step, and host_bytes per node). Those are held to the engine too: a state that persists through the
step (the parameters at stages 0-2, the optimizer state on the device) equals its column within 1%, and the
columns' sum covers everything the engine holds.
"""
import pytest
from conftest import read_json
from stage_runs import stage_run

pytestmark = pytest.mark.integration

KINDS = ("params", "gradients", "optimizer")
# The tiny model at every stage and offload; the 12.3M one where tensor size decides what ZeRO-3 partitions (the runs
# are shared with test_training; why no other 12.3M run: stage_runs.py).
CASES = ["stage0", "stage1", "stage2", "stage3", "stage1-cpu", "stage2-cpu", "stage3-cpu", "larger-stage3"]


@pytest.mark.integration
@pytest.mark.parametrize("name", CASES)
def test_model_state_bytes_match_the_engine(name, tmp_path_factory):
    run_dir, _ = stage_run(name, tmp_path_factory)
    estimated = {k: sum(v.values()) for k, v in read_json(run_dir / "plan.json")["current"]["after_step_bytes"].items()}
    ranks = [read_json(run_dir / "memory" / f"rank_{r}.json") for r in (0, 1)]
    measured = [{k: sum(m["model_states"][k].values()) for k in KINDS} for m in ranks]
    total = sum(estimated.values())
    for rank in measured:
        for kind in KINDS:
            assert rank[kind] == pytest.approx(estimated.get(kind, 0), rel=0.01, abs=0.01 * total), (kind, rank)
    psi = ranks[0]["parameters"]
    print(f"{name}: measured {sum(measured[0].values()) / psi:.3f} B/param, estimated {total / psi:.3f} B/param "
          f"(rank 0)")


@pytest.mark.integration
@pytest.mark.parametrize("name", CASES)
def test_the_preflight_columns_hold_what_the_engine_holds(name, tmp_path_factory):
    run_dir, _ = stage_run(name, tmp_path_factory)
    plan = read_json(run_dir / "plan.json")
    current = plan["current"]
    columns = current["device_bytes"]
    offloaded = current["offload_optimizer"] != "none"
    # per rank: the device columns that hold model states, and this rank's share of the node's host model states
    bound = sum(columns[k] for k in (*KINDS, "buffers")) + \
        current["host_bytes"]["model_states"] // plan["cluster"]["gpus_per_node"]
    for r in (0, 1):
        held = {k: sum(v.values()) for k, v in read_json(run_dir / "memory" / f"rank_{r}.json")["model_states"].items()}
        if current["zero_stage"] < 3:  # every rank keeps all parameters through the step
            assert held["params"] == pytest.approx(columns["params"], rel=0.01), (r, held, columns)
        if not offloaded:  # Adam's moments and the fp32 master partition live on the device through the step
            assert held["optimizer"] == pytest.approx(columns["optimizer"], rel=0.01), (r, held, columns)
        assert sum(held.values()) <= bound, (r, held, columns)
        print(f"{name} rank {r}: engine {sum(held.values()) / 2 ** 20:.2f} MiB, preflight's columns "
              f"{bound / 2 ** 20:.2f} MiB ({bound / sum(held.values()):.2f}x)")
