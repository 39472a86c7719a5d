"""memory.png: estimated beside measured memory per rank for every point with figures, grouped by ZeRO stage.

Top: the peak per rank (estimate stacked by component, measured by model states and the rest). Bottom: the model
states after an optimizer step. matplotlib is an optional extra (pip install 'trl_ds[report]').
"""
from typing import List, Sequence

from trl_ds.study.points import KINDS, PEAK_PARTS
from trl_ds.study.table import GiB, MiB, pick_unit, varying_keys

COLORS = {"params": "#4C72B0", "gradients": "#DD8452", "optimizer": "#55A868", "activations": "#C44E52",
          "logits": "#8172B3", "buffers": "#937860", "overhead": "#BBBBBB", "offloaded": "#64B5CD",
          "rest": "#E5E5E5"}
WIDTH = 0.34


def plottable(rows: Sequence[dict]) -> List[dict]:
    """Points with an estimate or a measured peak, by stage and then in sweep order."""
    shown = [r for r in rows if r["zero_stage"] is not None and (r["est_peak"] or r["meas_peak"])]
    return sorted(shown, key=lambda r: r["zero_stage"])


def bar_label(row: dict, axes: Sequence[str]) -> str:
    """ZeRO stage, the point's other coordinates, and its status unless it completed."""
    lines = [f"ZeRO {row['zero_stage']}"] + [f"{k}={row['override_values'][k]}" for k in axes
                                            if k not in ("zero", "zero.stage") and k in row["override_values"]]
    return "\n".join(lines + ([row["status"].upper()] if row["status"] != "completed" else []))


def peak_parts(r: dict):
    measured = [(k, r[f"meas_{k}"]) for k in KINDS]
    if r["meas_peak"] is not None:
        measured.append(("rest", r["meas_peak"] - (r["meas_model_states"] or 0)))
    return [(p, r[f"est_peak_{p}"]) for p in PEAK_PARTS], measured


def state_parts(r: dict):
    return [(k, r[f"est_{k}"]) for k in KINDS], [(k, r[f"meas_{k}"]) for k in KINDS]


def plot_memory(rows: Sequence[dict], path: str) -> int:
    """Write the figure; returns the number of points drawn."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    shown = plottable(rows)
    xs = [i + 0.5 * r["zero_stage"] for i, r in enumerate(shown)]  # a gap between stage groups
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 1.3 * len(shown) + 2), 8), sharex=True)
    unit, unit_name = pick_unit(shown)
    draw(top, shown, xs, peak_parts, unit, f"peak per rank ({unit_name})")
    states = max((r["est_model_states"] or r["meas_model_states"] or 0 for r in shown), default=0)
    unit, unit_name = (GiB, "GiB") if states >= GiB else (MiB, "MiB")
    draw(bottom, shown, xs, state_parts, unit, f"model states after a step ({unit_name})")
    top.set_title("Estimated (hatched, left) vs measured (right), per rank")
    axes = varying_keys(rows)
    bottom.set_xticks(xs, [bar_label(r, axes) for r in shown], fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, [k.replace("rest", "rest of measured peak") for k in COLORS], fontsize=7, ncol=5,
               loc="lower center")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return len(shown)


def draw(ax, shown: Sequence[dict], xs: Sequence[float], parts_of, unit: int, ylabel: str) -> None:
    for x, r in zip(xs, shown):
        estimated, measured = parts_of(r)
        stack(ax, x - WIDTH / 2 - 0.01, estimated, unit, hatch="//")
        stack(ax, x + WIDTH / 2 + 0.01, measured, unit, hatch="")
    ax.set_ylabel(ylabel)


def stack(ax, x: float, parts, unit: int, hatch: str) -> None:
    bottom = 0.0
    for name, nbytes in parts:
        if not nbytes:
            continue
        ax.bar(x, nbytes / unit, width=WIDTH, bottom=bottom, color=COLORS[name], hatch=hatch, edgecolor="white")
        bottom += nbytes / unit
