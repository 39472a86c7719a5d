"""A sweep's rows (trl_ds/study/points.py) as sweep.csv (every column, exact bytes) and as sweep.md (a readable
table: estimated / measured per cell, sorted by measured peak, and why each point without figures has none)."""
import csv
from typing import List, Optional, Sequence, Tuple

from trl_ds.study.points import KINDS, PEAK_PARTS

GiB, MiB = 2 ** 30, 2 ** 20
HEAD = ["point", "run_dir", "overrides"]
TAIL = ["status", "reason", "zero_stage", "world_size", "parameters",
        *(f"{side}_{k}" for k in (*KINDS, "model_states") for side in ("est", "meas")),
        *(f"est_peak_{p}" for p in PEAK_PARTS), "est_peak", "meas_peak", "peak_measure",
        "cpu_peak_rss", "gpu_peak_allocated", "gpu_peak_reserved",
        "final_loss", "eval_loss", "samples_per_second", "train_seconds", "wall_seconds"]
BYTES = {c for c in TAIL if c.startswith(("est_", "meas_", "cpu_peak", "gpu_peak"))}
SHORT = {"gradients": "grads", "model_states": "model states"}
EXPLAIN = ("Per rank, {unit}; each memory cell is estimated / measured. params, grads, optimizer, model states: "
           "after an optimizer step (plan.json's estimate against the engine's tensors, memory/rank_K.json). "
           "peak: the estimate's peak per rank against peak RSS on CPU ranks, or torch's peak reserved on GPU ranks "
           "(the CUDA context left out of both). Measured figures are the largest rank's.")


def override_keys(rows: Sequence[dict]) -> List[str]:
    """Every override key, in the order the points first name them."""
    return list(dict.fromkeys(k for r in rows for k in r["override_values"]))


def varying_keys(rows: Sequence[dict]) -> List[str]:
    """The sweep's axes: override keys whose value differs between points (all of them for a single point)."""
    keys = override_keys(rows)
    if len(rows) < 2:
        return keys
    return [k for k in keys if len({r["override_values"].get(k) for r in rows}) > 1]


def write_csv(rows: Sequence[dict], path: str) -> None:
    keys = override_keys(rows)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEAD + keys + [f"{c}_bytes" if c in BYTES else c for c in TAIL])
        for r in rows:
            out.writerow([r[c] for c in HEAD] + [r["override_values"].get(k, "") for k in keys]
                         + ["" if r[c] is None else r[c] for c in TAIL])


def sort_by_peak(rows: Sequence[dict]) -> List[dict]:
    """Smallest measured peak first; points without a measurement last, in sweep order."""
    return sorted(rows, key=lambda r: (r["meas_peak"] is None, r["meas_peak"] or 0))


def pick_unit(rows: Sequence[dict]) -> Tuple[int, str]:
    """GiB, or MiB when every peak is below 1 GiB (CPU-sized models)."""
    peaks = [r[c] for r in rows for c in ("est_peak", "meas_peak") if r[c] is not None]
    return (GiB, "GiB") if max(peaks, default=0) >= GiB else (MiB, "MiB")


def pair(est: Optional[int], meas: Optional[int], unit: int) -> str:
    show = lambda n: "-" if n is None else f"{n / unit:.2f}"  # noqa: E731
    return f"{show(est)} / {show(meas)}"


def number(x, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown_rows(rows: Sequence[dict], unit: int) -> Tuple[List[str], List[List[str]]]:
    axes, on_gpu = varying_keys(rows), any(r["gpu_peak_reserved"] is not None for r in rows)
    head = ["point", *axes, "status", *(SHORT.get(k, k) for k in (*KINDS, "model_states")), "peak"]
    evaluated = any(r.get("eval_loss") is not None for r in rows)
    head += (["CPU RSS"] if on_gpu else []) + ["final loss"] + (["eval loss"] if evaluated else [])
    head += ["samples/s", "wall s"]
    body = []
    for r in sort_by_peak(rows):
        cells = [r["point"], *(r["override_values"].get(k, "") for k in axes), r["status"]]
        cells += [pair(r[f"est_{k}"], r[f"meas_{k}"], unit) for k in (*KINDS, "model_states", "peak")]
        cells += [number(r["cpu_peak_rss"] and r["cpu_peak_rss"] / unit, 2)] if on_gpu else []
        cells += [number(r["final_loss"], 4)] + ([number(r.get("eval_loss"), 4)] if evaluated else [])
        cells += [number(r["samples_per_second"], 2), number(r["wall_seconds"], 1)]
        body.append(cells)
    return head, body


def render_markdown(rows: Sequence[dict], sources: Sequence[str]) -> str:
    unit, unit_name = pick_unit(rows)
    head, body = markdown_rows(rows, unit)
    statuses = ("completed", "failed", "stopped", "skipped", "incomplete")
    counts = {s: sum(r["status"] == s for r in rows) for s in statuses}
    lines = ["# Memory study", "", f"Sources: {', '.join(sources)}. {len(rows)} points: "
             + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ".", "", EXPLAIN.format(unit=unit_name), "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in body]
    notes = [f"- {r['point']} ({r['overrides'] or 'no overrides'}): {r['status']}: {r['reason']}"
             for r in rows if r["status"] != "completed"]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"
