"""Time the fit planner as a user runs it: a fresh `python -m trl_ds.plan` process, wall clock, N times.

    .venv/bin/python scripts/bench/bench_plan.py                    # llama3-70b on 1x8, the whole default grid
    .venv/bin/python scripts/bench/bench_plan.py --runs 20 model=llama3-8b cluster=2x8

The target is under 0.5 s wall for llama3-70b's default grid; it holds because the planner imports neither torch
nor DeepSpeed (the bench checks that too) and the grid itself is plain arithmetic.
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_S = 0.5
NO_HEAVY_IMPORTS = ("import sys, runpy; sys.argv = ['trl_ds.plan', *sys.argv[1:]]\n"
                    "try:\n    runpy.run_module('trl_ds.plan', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                    "print('HEAVY', [m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules])")


def time_once(overrides) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trl_ds.plan", *overrides], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - started


def heavy_imports(overrides) -> str:
    out = subprocess.run([sys.executable, "-c", NO_HEAVY_IMPORTS, *overrides], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("overrides", nargs="*", default=["model=llama3-70b", "cluster=1x8"])
    args = parser.parse_args(argv)
    time_once(args.overrides)  # warm the file cache
    times = sorted(time_once(args.overrides) for _ in range(args.runs))
    median = statistics.median(times)
    print(f"python -m trl_ds.plan {' '.join(args.overrides)}: {args.runs} runs, wall median {median:.3f} s, "
          f"min {times[0]:.3f} s, max {times[-1]:.3f} s (target < {TARGET_S} s: "
          f"{'met' if median < TARGET_S else 'MISSED'}); {heavy_imports(args.overrides)}")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
