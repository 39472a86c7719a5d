"""`trl-ds plan --plot FILE`: the plan's configurations as a picture (PNG, or SVG by the file's suffix).

Top: each configuration's per-rank peak, stacked by the plan's components, against the GPU's memory
(cluster.gpu_memory_gb). Bottom: its host RAM per node against cluster.cpu_memory_gb. The recommended configuration
is marked. Bars follow the table's order (fitting rows first, fastest first), at most MAX_BARS of them; --fits
keeps the fitting ones. matplotlib is an optional extra (pip install 'trl_ds[report]').
"""
import importlib.util
from typing import Dict, List, Optional, Sequence

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


def plot_plan(rows: Sequence[Estimate], best: Optional[Estimate], path: str, title: str) -> Dict[str, List[float]]:
    """Write the figure; returns each drawn bar series' heights in GiB, read back from the figure's bars, and the
    index of the bar marked recommended."""
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
    if not s.judged_on_host:
        top.axhline(s.gpu_memory_gb, color="black", linestyle="--", label=f"GPU memory {s.gpu_memory_gb:g} GiB")
    hosts = bottom.bar(xs, [e.host_total / GiB for e in shown], color="#64B5CD", width=0.7, label="host per node")
    drawn["host"] = [b.get_height() for b in hosts]
    bottom.axhline(s.cpu_memory_gb, color="black", linestyle=":", label=f"host RAM {s.cpu_memory_gb:g} GiB per node")
    drawn["recommended"] = mark_best(top, shown, best, base)
    top.set_ylim(0, 1.4 * max(base + ([] if s.judged_on_host else [s.gpu_memory_gb])))  # room for the legend
    bottom.set_ylim(0, 1.4 * max(drawn["host"] + [s.cpu_memory_gb]))
    top.set_ylabel("per-rank peak (GiB)")
    bottom.set_ylabel("host per node (GiB)")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=7, ncol=2, loc="upper right")
    bottom.legend(fontsize=7, loc="upper right")
    bottom.set_xticks(xs, [bar_label(e) for e in shown], fontsize=6, rotation=90)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def mark_best(ax, shown: Sequence[Estimate], best: Optional[Estimate], tops: Sequence[float]) -> List[int]:
    marked = [i for i, e in enumerate(shown) if best is not None and e.setup == best.setup]
    for i in marked:
        ax.annotate("recommended", (i, tops[i]), xytext=(0, 14), textcoords="offset points", ha="center",
                    fontsize=8, fontweight="bold", arrowprops={"arrowstyle": "->"})
    return marked


def plot_rows(cfg, rows: Sequence[Estimate], best: Optional[Estimate], path: str, only_fitting: bool = False
              ) -> Dict[str, List[float]]:
    """Draw the plan's rows (the table's order; --fits: the fitting ones) and say where; returns the bars drawn."""
    if only_fitting:
        rows = [e for e in rows if e.verdict == "fits"] or rows
    c = cfg.cluster
    title = (f"{display_name(cfg.model)} on {c.nodes} x {c.gpus_per_node} {c.gpu} at {c.gpu_memory_gb:g} GiB: "
             f"{min(len(rows), MAX_BARS)} of {len(rows)} configurations (fits first, fastest first)")
    drawn = plot_plan(rows, best, path, title)
    print(f"trl-ds plan: wrote {path} ({min(len(rows), MAX_BARS)} configurations)")
    return drawn


def require_matplotlib() -> None:
    """--plot without matplotlib: one line, before the plan is computed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError([MISSING])
