"""`trl-ds report PATH [PATH ...] [--out DIR]`: a memory study's table and plot, estimated vs measured.

    python -m trl_ds -m zero=stage0,stage1,stage2,stage3 offload=none,cpu    # the sweep: one real run per point
    trl-ds report multirun/2026-12-02/10-00-00                    # its report, written into that folder

Writes sweep.csv (every figure in bytes), sweep.md (sorted by measured peak) and memory.png (needs matplotlib), and
for one run dir its loss.png, into --out DIR, else the first sweep folder, the run dir, or the folder holding the run
dirs; prints the table. A point with missing or half-written files is reported as incomplete, naming the file.
"""
import importlib.util
import os
import sys
from typing import List, Optional, Sequence

from trl_ds.errors import EXIT_USER_ERROR
from trl_ds.rundir.layout import OVERRIDES, PLAN, RESOLVED_CONFIG, SUMMARY
from trl_ds.study.points import read_point
from trl_ds.study.table import render_markdown, write_csv

RUN_FILES = (SUMMARY, PLAN, RESOLVED_CONFIG, OVERRIDES)


def is_run_dir(path: str) -> bool:
    return any(os.path.exists(os.path.join(path, name)) for name in RUN_FILES)


def sweep_points(folder: str) -> List[str]:
    """A sweep folder's points in job order: numbered folders and any other visible folder holding a run."""
    names = [n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)) and not n.startswith(".")]
    numbered = sorted((n for n in names if n.isdigit()), key=int)
    named = sorted(n for n in names if not n.isdigit() and is_run_dir(os.path.join(folder, n)))
    return [os.path.join(folder, n) for n in numbered + named]


def find_runs(paths: Sequence[str]):
    """(run dirs, sweep folders) for the paths given; a path that is neither is a user error."""
    runs, sweeps, problems = [], [], []
    for path in map(os.path.abspath, paths):
        if not os.path.isdir(path):
            problems.append(f"{path} is not a folder")
        elif is_run_dir(path):
            runs.append(path)
        elif sweep_points(path):
            sweeps.append(path)
            runs += sweep_points(path)
        else:
            problems.append(f"{path} holds no run: neither a run dir (summary.json, plan.json, config.yaml) nor a "
                            f"sweep folder (multirun/<date>/<time> with numbered point folders)")
    return runs, sweeps, problems


def write_report(runs: Sequence[str], sources: Sequence[str], out_dir: str) -> str:
    """Read every point, write sweep.csv, sweep.md and memory.png into out_dir; returns the table's text."""
    common = os.path.commonpath([os.path.dirname(r) for r in runs])
    rows = [{**read_point(r), "point": os.path.relpath(r, common)} for r in runs]
    os.makedirs(out_dir, exist_ok=True)
    write_csv(rows, os.path.join(out_dir, "sweep.csv"))
    text = render_markdown(rows, sources)
    with open(os.path.join(out_dir, "sweep.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"trl-ds report: wrote {out_dir}/sweep.csv and sweep.md")
    write_plot(rows, os.path.join(out_dir, "memory.png"))
    return text


def write_plot(rows: Sequence[dict], path: str) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # an optional extra: the csv and md stand without it
        print("trl-ds report: matplotlib is not installed, so memory.png is not written "
              "(pip install 'trl_ds[report]')")
        return
    from trl_ds.study.plot import plot_memory

    drawn = plot_memory(rows, path) if any(r["est_peak"] or r["meas_peak"] for r in rows) else 0
    print(f"trl-ds report: wrote {path} ({drawn} points)" if drawn else
          "trl-ds report: no point has memory figures; memory.png is not written")


def default_out(runs: Sequence[str], sweeps: Sequence[str]) -> str:
    """A sweep's report goes into its folder, one run's into its run dir: never a shared parent."""
    if sweeps:
        return sweeps[0]
    return runs[0] if len(runs) == 1 else os.path.commonpath([os.path.dirname(r) for r in runs])


def report(paths: Sequence[str], out: Optional[str] = None) -> int:
    """The report of `paths` (sweep folders and/or run dirs) into `out`, or default_out's folder; the exit code."""
    runs, sweeps, problems = find_runs(paths)
    if problems:
        print("trl-ds report: " + "\n  ".join(problems), file=sys.stderr)
        return EXIT_USER_ERROR
    out_dir = out or default_out(runs, sweeps)
    write_report(runs, paths, out_dir)
    if len(runs) == 1 and not sweeps:  # one run: its loss curve too, read from its metrics.jsonl
        if importlib.util.find_spec("matplotlib") is None:
            print("trl-ds report: matplotlib is not installed, so loss.png is not written "
                  "(pip install 'trl_ds[report]')")
        else:
            from trl_ds.study.loss_plot import write_loss_plot

            print(f"trl-ds report: {write_loss_plot(runs[0], out_dir)}")
    return 0
