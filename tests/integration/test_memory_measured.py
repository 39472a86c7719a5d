"""The estimator's model-state bytes against the real engine: 2 CPU ranks, fp32, ZeRO 0-3 × offload none/cpu.

Each run's worker counts, after training, the bytes its engine's tensors hold (memory/rank_K.json, see
trl_ds/worker/measure.py); plan.json in the same run dir holds the estimate the app made before launching. They
must agree within 1% per kind (parameters, gradients, optimizer state) on every rank.
"""
import pytest
from conftest import read_json, run_app

COMBOS = [(0, "none"), (1, "none"), (2, "none"), (3, "none"), (1, "cpu"), (2, "cpu"), (3, "cpu")]
# A CPU-sized Llama built in code (12.3M parameters): most tensors are above ZeRO-3's persistence threshold.
LARGER = ["model.hidden_size=512", "model.intermediate_size=1408", "model.num_attention_heads=8",
          "model.num_key_value_heads=4"]
MODELS = {"tiny": [], "larger": LARGER}
KINDS = ("params", "gradients", "optimizer")


def measured_and_estimated(tmp_path, overrides):
    run_dir = tmp_path / "run"
    out = run_app([*overrides, "trainer.max_steps=2"], run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    estimated = {k: sum(v.values()) for k, v in read_json(run_dir / "plan.json")["current"]["after_step_bytes"].items()}
    ranks = [read_json(run_dir / "memory" / f"rank_{r}.json") for r in (0, 1)]
    return estimated, [{k: sum(m["model_states"][k].values()) for k in KINDS} for m in ranks], ranks


@pytest.mark.integration
@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("stage,offload", COMBOS)
def test_model_state_bytes_match_the_engine(tmp_path, model, stage, offload):
    estimated, measured, ranks = measured_and_estimated(
        tmp_path, [f"zero=stage{stage}", f"offload={offload}", *MODELS[model]])
    total = sum(estimated.values())
    for rank in measured:
        for kind in KINDS:
            assert rank[kind] == pytest.approx(estimated.get(kind, 0), rel=0.01, abs=0.01 * total), (kind, rank)
    psi = ranks[0]["parameters"]
    print(f"{model} stage {stage} offload {offload}: measured {sum(measured[0].values()) / psi:.3f} B/param, "
          f"estimated {total / psi:.3f} B/param (rank 0)")
