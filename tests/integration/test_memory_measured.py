"""The estimator's model-state bytes against the real engine: 2 CPU ranks, fp32, ZeRO 0-3 × offload none/cpu.

Each run's worker counts, after training, the bytes its engine's tensors hold (memory/rank_K.json, see
trl_ds/worker/measure.py); plan.json in the same run dir holds the estimate the app made before launching. They
must agree within 1% per kind (parameters, gradients, optimizer state) on every rank.
"""
import pytest
from conftest import read_json
from stage_runs import stage_run

KINDS = ("params", "gradients", "optimizer")
# The tiny model at every stage and offload; the 12.3M one where tensor size decides what ZeRO-3 partitions, and
# once each for stage 1-2 with and without offload (the runs are shared with test_training).
CASES = ["stage0", "stage1", "stage2", "stage3", "stage2-cpu", "stage3-cpu", "larger-stage2", "larger-stage1-cpu",
         "larger-stage3", "larger-stage3-cpu"]


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
