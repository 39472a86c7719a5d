"""`trl-ds check-equivalence [overrides]`: are batch shapes and ZeRO stages really the same training?

TRL's guide says 1 GPU × 32, 1 × 4 × accumulation 8 and 8 GPUs × 4 "are equivalent and should produce the same
results"; ZeRO stages must change memory, not the math. This runs each shape (or stage) of the current config as a
real trl_ds run, in fp32 with the same seed and data order, and compares the loss at every logged step and the
final weights.

    trl-ds check-equivalence                     # 1×8×1, 1×2×4, 2×4×1, 2×2×2, 4×2×1 (ranks×micro×accum)
    trl-ds check-equivalence --zero              # stages 0-3 and 2/3 with CPU offload, 2 ranks

Tolerance: fp32 sums in another order differ by roundoff, within 1e-5 relative for a loss; weights get 1e-4, since
Adam turns the roundoff of a near-zero gradient into a visibly different update of that element. A wrong global
batch or normalisation is off by 1e-2 or more.
"""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

from trl_ds.config.partial_batch import count_rows, explain_divergence
from trl_ds.rundir.layout import FINAL_MODEL_DIR, METRICS

LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4


@dataclass
class Point:
    name: str
    overrides: List[str]


def batch_shapes(global_batch: int, ranks: List[int]) -> List[Point]:
    """The guide's table scaled to CPU: the same global batch through micro-batches, ranks and accumulation."""
    shapes = [(1, global_batch, 1), (1, global_batch // 4, 4)]
    shapes += [(r, global_batch // r, 1) for r in ranks if r > 1]
    shapes += [(2, global_batch // 4, 2)] if 2 in ranks else []
    return [Point(f"{r}×{m}×{a}", [f"cluster.gpus_per_node={r}", f"trainer.per_device_train_batch_size={m}",
                                   f"trainer.gradient_accumulation_steps={a}"]) for r, m, a in shapes]


def zero_points(global_batch: int) -> List[Point]:
    base = ["cluster.gpus_per_node=2", f"trainer.per_device_train_batch_size={global_batch // 2}"]
    stages = [("stage0", []), ("stage1", []), ("stage2", []), ("stage3", []), ("stage2", ["offload=cpu"]),
              ("stage3", ["offload=cpu"])]
    return [Point(z + ("+cpu" if extra else ""), base + [f"zero={z}", *extra]) for z, extra in stages]


def run_point(point: Point, user_overrides: List[str], out_dir: str, steps: int) -> str:
    run_dir = os.path.join(out_dir, point.name.replace("×", "x").replace("+", "_"))
    cmd = [sys.executable, "-m", "trl_ds", *user_overrides, *point.overrides, f"trainer.max_steps={steps}",
           "precision=fp32", "save_final_model=true", f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{point.name} failed (exit {done.returncode}):\n{done.stderr[-2000:]}{done.stdout[-2000:]}")
    return run_dir


def read_losses(run_dir: str) -> List[float]:
    with open(os.path.join(run_dir, METRICS)) as f:
        return [record["loss"] for record in map(json.loads, f) if "loss" in record]


def weight_deviation(reference_dir: str, run_dir: str) -> float:
    """Largest relative L2 difference of any tensor of the final weights."""
    from safetensors.torch import load_file

    ref = load_file(os.path.join(reference_dir, FINAL_MODEL_DIR, "model.safetensors"))
    other = load_file(os.path.join(run_dir, FINAL_MODEL_DIR, "model.safetensors"))
    return max(((other[k] - ref[k]).norm() / ref[k].norm().clamp_min(1e-30)).item() for k in ref)


def compare(runs: Dict[str, str], global_batch: Optional[int] = None) -> Dict:
    """global_batch: explain a divergence that starts at an epoch's partial last batch (read from the runs' data)."""
    names = list(runs)
    losses = {name: read_losses(runs[name]) for name in names}
    ref = losses[names[0]]
    by_point = {n: [abs(losses[n][i] - ref[i]) / abs(ref[i]) for i in range(len(ref))] for n in names}
    per_step = [max(by_point[n][i] for n in names) for i in range(len(ref))]
    weights = {n: weight_deviation(runs[names[0]], runs[n]) for n in names[1:]}
    steps_equal = all(len(losses[n]) == len(ref) for n in names)
    result = {"points": names, "losses": losses, "step_deviation": per_step,
              "max_loss_deviation": max(per_step), "weight_deviation": weights,
              "max_weight_deviation": max(weights.values(), default=0.0),
              "loss_rtol": LOSS_RTOL, "weight_rtol": WEIGHT_RTOL}
    result["equivalent"] = (steps_equal and result["max_loss_deviation"] <= LOSS_RTOL
                            and result["max_weight_deviation"] <= WEIGHT_RTOL)
    if not result["equivalent"] and steps_equal and global_batch:
        result["cause"] = explain_divergence(per_step, by_point, dataset_rows(runs[names[0]]), global_batch, LOSS_RTOL)
    return result


def dataset_rows(run_dir: str):
    from trl_ds.rundir.layout import load_run_config

    cfg = load_run_config(run_dir)
    return None if cfg.trainer.dataloader_drop_last else count_rows(cfg.trainer.dataset_name)


def render_table(result: Dict) -> str:
    names = result["points"]
    lines = ["| step | " + " | ".join(names) + " | max rel. deviation |",
             "|---" * (len(names) + 2) + "|"]
    for i, dev in enumerate(result["step_deviation"]):
        lines.append(f"| {i + 1} | " + " | ".join(f"{result['losses'][n][i]:.6f}" for n in names) + f" | {dev:.1e} |")
    lines.append("| final weights | – | " + " | ".join(f"{result['weight_deviation'][n]:.1e}" for n in names[1:])
                 + f" | {result['max_weight_deviation']:.1e} |")
    verdict = "EQUIVALENT" if result["equivalent"] else "NOT EQUIVALENT"
    lines.append(f"\n{verdict}: max loss deviation {result['max_loss_deviation']:.1e} (tolerance {LOSS_RTOL:.0e}), "
                 f"max weight deviation {result['max_weight_deviation']:.1e} (tolerance {WEIGHT_RTOL:.0e}).")
    if result.get("cause"):
        lines.append(result["cause"])
    return "\n".join(lines)


def check_equivalence(global_batch: int, steps: int, ranks: List[int], only: List[str], zero: bool, out: str,
                      overrides: List[str]) -> int:
    """Run every point (only those named in `only`, e.g. 1x8x1, when given), compare, write equivalence.json and .md
    into `out`; 0 when equivalent, else 1. global_batch must divide by 4 (trl-ds check-equivalence says so)."""
    points = zero_points(global_batch) if zero else batch_shapes(global_batch, ranks)
    if only:
        wanted = [name.replace("x", "×") for name in only]
        points = [p for p in points if p.name in wanted]
    runs = {}
    for point in points:
        print(f"running {point.name} ...", flush=True)
        runs[point.name] = run_point(point, overrides, out, steps)
    result = compare(runs, global_batch)
    table = render_table(result)
    print(table)
    with open(os.path.join(out, "equivalence.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(out, "equivalence.md"), "w") as f:
        f.write(table + "\n")
    return 0 if result["equivalent"] else 1
