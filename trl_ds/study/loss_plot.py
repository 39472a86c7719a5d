"""loss.png for one run: train and eval loss by step, from its metrics.jsonl (`trl-ds report RUN_DIR`)."""
import os
from typing import List, Tuple

from trl_ds.rundir.metrics import read_rows

Curve = List[Tuple[int, float]]


def loss_curves(metrics_path: str) -> Tuple[Curve, Curve]:
    """(train, eval) as (step, loss) points; repeated steps keep the latest, cut lines are skipped."""
    train, evaluation = {}, {}
    for row in read_rows(metrics_path):
        if "loss" in row and "step" in row:
            train[row["step"]] = row["loss"]
        if "eval_loss" in row and "step" in row:
            evaluation[row["step"]] = row["eval_loss"]
    return sorted(train.items()), sorted(evaluation.items())


def write_loss_plot(run_dir: str, out_dir: str) -> str:
    """Writes out_dir/loss.png; returns what was written, for the report's output."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(metrics):
        return f"{run_dir} has no metrics.jsonl, so loss.png is not written"
    train, evaluation = loss_curves(metrics)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for curve, label, style in ((train, "train loss", "-"), (evaluation, "eval loss", "o--")):
        if curve:
            ax.plot(*zip(*curve), style, label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(os.path.basename(run_dir.rstrip("/")))
    ax.legend()
    ax.grid(alpha=0.3)
    path = os.path.join(out_dir, "loss.png")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f"wrote {path} ({len(train)} train, {len(evaluation)} eval points)"
