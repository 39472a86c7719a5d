"""`trl-ds plan --plot FILE`: the plan's configurations as a picture (PNG, or SVG by the file's suffix).

Top: each configuration's per-rank peak, stacked by the plan's components, against the GPU's memory
(cluster.gpu_memory_gb). Bottom: its host RAM per node against cluster.cpu_memory_gb. The recommended configuration
is marked. Bars follow the table's order (fitting rows first, fastest first), at most MAX_BARS of them; --fits
keeps the fitting ones. matplotlib is an optional extra (pip install 'trl_ds[report]').
"""
import importlib.util
import sys
from typing import Dict, List, Optional, Sequence

from trl_ds.config.model_source import display_name
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.plan import planner
from trl_ds.plan.grid import offload_name
from trl_ds.plan.memory import Estimate, GiB
from trl_ds.plan.runtime import split_tokens
from trl_ds.study.plot import COLORS

MAX_BARS = 30
EXTRA_COLORS = {"reference": "#DA8BC3", "generation": "#CCB974"}
INSTALL = "trl-ds plan: --plot needs matplotlib, which is not installed: pip install 'trl_ds[report]'"


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


def plan_rows(args: Sequence[str]):
    """(rows in the table's order, the recommended one, the title) for the planner's overrides."""
    rest, _tokens = split_tokens(list(args))
    overrides = [a for a in rest if a not in planner.FLAGS]
    cfg, base = planner.load(overrides)
    rows, current = planner.grid(base, cfg.batch.global_size), planner.estimate(base)
    times = planner.times_for(cfg, rows + [current])
    rows = planner.by_time(rows, times)
    best = planner.recommend(rows, times)
    if "--fits" in args:
        rows = [e for e in rows if e.verdict == "fits"] or rows
    c = cfg.cluster
    title = (f"{display_name(cfg.model)} on {c.nodes} x {c.gpus_per_node} {c.gpu} at {c.gpu_memory_gb:g} GiB: "
             f"{min(len(rows), MAX_BARS)} of {len(rows)} configurations (fits first, fastest first)")
    return rows, best, title


def plot_main(args: Sequence[str], path: str) -> int:
    """The plan's text as without --plot, then the picture."""
    if importlib.util.find_spec("matplotlib") is None:
        print(INSTALL, file=sys.stderr)
        return EXIT_USER_ERROR
    code = planner.main(list(args))
    if code:
        return code
    try:
        rows, best, title = plan_rows(args)
    except ConfigError as err:  # already reported by the plan above
        print(f"trl-ds plan: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    plot_plan(rows, best, path, title)
    print(f"trl-ds plan: wrote {path} ({min(len(rows), MAX_BARS)} configurations)")
    return 0
