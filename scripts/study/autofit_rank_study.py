"""Auto-fit's ranking vs measurement on CPU: `python scripts/study/autofit_rank_study.py [--repeats 2] [--steps 12]`.

The tiny Llama of scripts/study/steptime_study.py on 2 CPU ranks, `zero=auto offload=auto tp=auto` with the calibrated
CPU hardware file: auto-fit ranks every candidate the launch accepts; POINTS picks some of them across
tp × ratio × stage × offload, and each is trained for real (real DeepSpeed, gloo) for a few steps, `--repeats`
times, in alternating order (forward, then backward, ...) so a slow spell of the shared machine falls on both ends
alike. The fastest pass of each point counts (other work only ever slows a run down). Written: the estimate and
every measurement to docs/autofit_rank_study.json, the table, Spearman's rank correlation of estimated vs measured
and the pick's gap to the measured fastest to docs/autofit_rank_study.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.study.steptime_study import FIXED, HARDWARE  # noqa: E402
from trl_ds.check.plan_rows import RowCheck  # noqa: E402
from trl_ds.config.compose import compose  # noqa: E402
from trl_ds.plan.autofit import candidates  # noqa: E402
from trl_ds.plan.planner import grid_overrides  # noqa: E402
from trl_ds.study.calibrate import spearman, steady_step_seconds, winner_gap  # noqa: E402

AUTO = ["zero=auto", "offload=auto", "tp=auto"]
POINTS = ("zero=stage0 offload=none tp=1", "zero=stage0 offload=none tp=2", "zero=stage1 offload=opt-cpu tp=2",
          "zero=stage1 offload=none tp=1", "zero=stage2 offload=none tp=2", "zero=stage3 offload=opt-cpu@0.5 tp=1",
          "zero=stage3 offload=none tp=1")
OUT = os.path.join(REPO, "docs", "autofit_rank_study")


def ranked(steps: int):
    """Auto-fit's candidates, fastest first, as it ranks them for a launch."""
    cfg = compose([*FIXED, f"trainer.max_steps={steps}", *AUTO, f"cluster.gpu={HARDWARE}"])
    return candidates(cfg, accepts=RowCheck(cfg))


def measure(overrides, steps: int) -> float:
    """Seconds per optimizer step of a real run, steady state (as scripts/study/steptime_study.py reads it)."""
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "trl_ds", *FIXED, f"trainer.max_steps={steps}", *overrides,
               f"hydra.run.dir={run_dir}"]
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
        return steady_step_seconds(run_dir)


def summary(points, estimated, measured) -> dict:
    """Spearman's rho of estimated vs measured seconds per step, the pick (least estimated) and its gap."""
    est = [estimated[p] for p in points]
    meas = [min(measured[p]) for p in points]
    pick, fastest = points[est.index(min(est))], points[meas.index(min(meas))]
    return {"spearman": spearman(est, meas), "pick": pick, "fastest_measured": fastest,
            "pick_gap": winner_gap(est, meas)}


def markdown(points, estimated, measured, result, note: str) -> str:
    rows = ["| point (auto-fit's label) | estimated rank | estimated s/step | measured s/step (each pass) | "
            "measured rank |", "|---|---|---|---|---|"]
    by_est = sorted(points, key=lambda p: estimated[p])
    by_meas = sorted(points, key=lambda p: min(measured[p]))
    for p in by_est:
        passes = ", ".join(f"{s:.3f}" for s in measured[p])
        rows.append(f"| {p} | {by_est.index(p) + 1} | {estimated[p]:.3f} | {passes} | {by_meas.index(p) + 1} |")
    rows += ["", f"Spearman rank correlation (estimated vs fastest measured pass): {result['spearman']:.2f}; "
                 f"auto-fit's pick {result['pick']} measured {result['pick_gap']:.1%} slower than the fastest "
                 f"measured, {result['fastest_measured']}.", "", note]
    return "# Auto-fit's ranking vs measurement (tiny Llama, 2 CPU ranks)\n\n" + "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    by_label = {c.label(): c for c in ranked(args.steps)}
    points = [p for p in POINTS if p in by_label]
    estimated = {p: by_label[p].time.seconds for p in points}
    measured = {p: [] for p in points}
    for n in range(args.repeats):
        for p in (points if n % 2 == 0 else points[::-1]):
            measured[p].append(measure(grid_overrides(by_label[p].estimate.setup), args.steps))
            print(f"pass {n + 1}: {p}: {measured[p][-1]:.3f} s/step (estimated {estimated[p]:.3f})", flush=True)
    result = summary(points, estimated, measured)
    with open(OUT + ".json", "w") as f:
        json.dump({"estimated": estimated, "measured": measured, **result, "steps": args.steps,
                   "date": time.strftime("%Y-%m-%d %H:%M"), "note": args.note}, f, indent=1)
    with open(OUT + ".md", "w") as f:
        f.write(markdown(points, estimated, measured, result, args.note))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
