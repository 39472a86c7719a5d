"""ZenFlow (zero.zenflow, DeepSpeed's ZenFlowConfig by its own names) on 2 CPU ranks: ZeRO-2 with the optimizer
offloaded, DeepSpeed's ZenFlow optimizer steps, and the model learns. ZenFlow delays the updates of the gradient
columns it finds unimportant, so its losses are not the plain offload's (no equivalence is asserted)."""
import json
import math

import pytest
from conftest import read_json, run_app

pytestmark = [pytest.mark.integration, pytest.mark.beside, pytest.mark.xdist_group("beside")]

ZENFLOW = "zero.zenflow={topk_ratio:0.1,update_interval:2,select_strategy:step,select_interval:2}"


def test_zenflow_trains_on_cpu_ranks(tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(["zero=stage2", "offload=cpu", ZENFLOW, "trainer.max_steps=4"], run_dir)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    zero = read_json(run_dir / "ds_config.json")["zero_optimization"]
    assert zero["zenflow"] == {"topk_ratio": 0.1, "update_interval": 2, "select_strategy": "step",
                               "select_interval": 2}
    logs = "".join(p.read_text(errors="replace") for p in run_dir.glob("logs/**/*.log"))
    assert "Zenflow: clearing selective optimizer states" in logs  # DeepSpeed's ZenFlow optimizer, not plain Adam
    with open(run_dir / "metrics.jsonl") as f:
        losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
