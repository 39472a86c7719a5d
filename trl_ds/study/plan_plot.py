"""`trl-ds plan --plot FILE`: the plan's configurations as a picture (PNG, or SVG by the file's suffix).

Top: each configuration's per-rank peak, stacked by component, against the GPU's memory; bottom: its host RAM per
node. Bars follow the table's order, at most MAX_BARS, the recommended one marked; --fits keeps the fitting ones;
--need draws one bar per shape that fits. plot_target checks the target before the plan is computed (a folder gets
plan.png, a bare name .png). matplotlib is an optional extra (pip install 'trl_ds[report]').
"""
import importlib.util
import os
import sys
from typing import Dict, List, Optional, Sequence, TextIO

from trl_ds.config.model_source import display_name
from trl_ds.errors import ConfigError
from trl_ds.plan import planner
from trl_ds.plan.grid import offload_name
from trl_ds.plan.memory import Estimate, GiB
from trl_ds.study.plot import COLORS

MAX_BARS = 30
EXTRA_COLORS = {"reference": "#DA8BC3", "generation": "#CCB974"}
MISSING = "--plot needs matplotlib, which is not installed: pip install 'trl_ds[report]'"
INSTALL = f"trl-ds plan: {MISSING}"


def bar_label(e: Estimate) -> str:
    s = e.setup
    return (f"Z{s.stage} {planner.offload_shown(s) if offload_name(s) != 'none' else ''}\n"
            f"{'ckpt ' if s.gradient_checkpointing else ''}mb{s.micro_batch}").replace(" \n", "\n")


def plot_plan(rows: Sequence[Estimate], best: Optional[Estimate], path: str, title: str,
              labels: Optional[Sequence[str]] = None, mark: str = "recommended") -> Dict[str, List[float]]:
    """Write the figure; returns each drawn bar series' heights in GiB, read back from the figure's bars, and the
    index of the bar marked recommended. Each bar's GPU line is its own setup's memory (one line where all agree)."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    shown = list(rows[:MAX_BARS])
    s = shown[0].setup
    parts = planner.columns(s)
    xs = list(range(len(shown)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(7.0, 0.5 * len(shown) + 3), 8), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    drawn, base = {}, [0.0] * len(shown)
    for part in parts:
        heights = [e.device[part] / GiB for e in shown]
        bars = top.bar(xs, heights, bottom=base, color={**COLORS, **EXTRA_COLORS}[part], label=part, width=0.7)
        drawn[part] = [b.get_height() for b in bars]
        base = [b + h for b, h in zip(base, heights)]
    limits = [e.setup.gpu_memory_gb for e in shown if not e.setup.judged_on_host]
    gpu_lines(top, shown)
    hosts = bottom.bar(xs, [e.host_total / GiB for e in shown], color="#64B5CD", width=0.7, label="host per node")
    drawn["host"] = [b.get_height() for b in hosts]
    bottom.axhline(s.cpu_memory_gb, color="black", linestyle=":", label=f"host RAM {s.cpu_memory_gb:g} GiB per node")
    drawn["recommended"] = mark_best(top, shown, best, base, mark)
    top.set_ylim(0, 1.4 * max(base + limits))  # room for the legend
    bottom.set_ylim(0, 1.4 * max(drawn["host"] + [s.cpu_memory_gb]))
    top.set_ylabel("per-rank peak (GiB)")
    bottom.set_ylabel("host per node (GiB)")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=7, ncol=2, loc="upper right")
    bottom.legend(fontsize=7, loc="upper right")
    bottom.set_xticks(xs, list(labels or [bar_label(e) for e in shown])[:len(shown)], fontsize=6, rotation=90)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def gpu_lines(ax, shown: Sequence[Estimate]) -> None:
    """The GPU's memory: one line across, or a short one over each bar where the bars' GPUs differ (--need)."""
    limits = [None if e.setup.judged_on_host else e.setup.gpu_memory_gb for e in shown]
    if len(set(limits)) == 1 and limits[0] is not None:
        ax.axhline(limits[0], color="black", linestyle="--", label=f"GPU memory {limits[0]:g} GiB")
        return
    for i, limit in enumerate(limits):
        if limit is not None:
            ax.hlines(limit, i - 0.4, i + 0.4, color="black", linestyles="--", label="GPU memory" if i == 0 else None)


def mark_best(ax, shown: Sequence[Estimate], best: Optional[Estimate], tops: Sequence[float], text: str
              ) -> List[int]:
    marked = [i for i, e in enumerate(shown) if best is not None and e.setup == best.setup]
    for i in marked:
        ax.annotate(text, (i, tops[i]), xytext=(0, 14), textcoords="offset points", ha="center",
                    fontsize=8, fontweight="bold", arrowprops={"arrowstyle": "->"})
    return marked


def plot_rows(cfg, rows: Sequence[Estimate], best: Optional[Estimate], path: str, only_fitting: bool = False,
              to: TextIO = sys.stdout) -> Dict[str, List[float]]:
    """Draw the plan's rows (--fits: the fitting ones) and say where; returns the bars drawn."""
    if only_fitting:
        rows = [e for e in rows if e.verdict == "fits"]
        if not rows:
            print(f"trl-ds plan: nothing fits, so --plot --fits drew nothing ({path} not written).", file=to)
            return {}
    c = cfg.cluster
    title = (f"{display_name(cfg.model)} on {c.nodes} x {c.gpus_per_node} {c.gpu} at {c.gpu_memory_gb:g} GiB: "
             f"{min(len(rows), MAX_BARS)} of {len(rows)} configurations (fits first, fastest first)")
    drawn = plot_plan(rows, best, path, title)
    print(f"trl-ds plan: wrote {path} ({min(len(rows), MAX_BARS)} configurations)", file=to)
    return drawn


def plot_need(fitting: Sequence, path: str, to: TextIO = sys.stdout) -> Dict[str, List[float]]:
    """--need --plot: each shape that fits, its fastest configuration (need.Shape's best), cheapest first."""
    if not fitting:
        print(f"trl-ds plan: nothing fits on any shape, so --plot drew nothing ({path} not written).", file=to)
        return {}
    shown = fitting[:MAX_BARS]
    rows = [s.best.estimate for s in shown]
    labels = [f"{s.gpu} x{s.gpus}\n{bar_label(s.best.estimate)}" for s in shown]
    title = f"trl-ds plan --need: {len(shown)} of {len(fitting)} shapes that fit, cheapest first"
    smallest = next((s.best.estimate for s in shown if s.smallest), None)
    drawn = plot_plan(rows, smallest, path, title, labels=labels, mark="smallest that fits")
    print(f"trl-ds plan: wrote {path} ({len(shown)} shapes)", file=to)
    return drawn


def plot_target(path: str) -> str:
    """The file --plot writes, checked first: ConfigError for a missing or read-only folder or a format."""
    from matplotlib.backend_bases import FigureCanvasBase

    if os.path.isdir(path):
        path = os.path.join(path, "plan.png")
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if not suffix:
        path, suffix = path + ".png", "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ConfigError([f"--plot {path}: matplotlib cannot write .{suffix} files; name a .png, .svg or .pdf file "
                           f"(it writes {', '.join('.' + f for f in sorted(formats))})."])
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError([f"--plot {path}: the folder {os.path.dirname(path) or folder} does not exist; create it "
                           f"(mkdir -p {os.path.dirname(path) or folder}) or name a file in an existing folder."])
    where = path if os.path.exists(path) else folder
    if not os.access(where, os.W_OK):
        raise ConfigError([f"--plot {path}: {where} cannot be written (permissions); name a file in a folder you can "
                           f"write."])
    return path


def require_matplotlib() -> None:
    """--plot without matplotlib: one line, before the plan is computed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError([MISSING])
