"""One sweep point, read from its run dir into one flat row: its overrides, how it ended, and memory estimated
(plan.json) beside memory measured (memory/rank_K.json), like against like: the model states after the last
optimizer step, summed over their places; the peak per rank (CPU: estimated host RAM against peak RSS; GPU: the
device terms less the CUDA context against torch's peak reserved). Measured figures are the largest over ranks.
"""
import glob
import json
import os
import re
from typing import Dict, List, Optional

import yaml

from trl_ds.plan.memory import CUDA_CONTEXT_BYTES
from trl_ds.rundir.layout import MEMORY_DIR, OVERRIDES, PLAN, SUMMARY, memory_file, summary_is_latest

KINDS = ("params", "gradients", "optimizer")
PEAK_PARTS = ("params", "gradients", "optimizer", "activations", "logits", "buffers", "overhead", "offloaded")
RANK_FILE = re.compile(r"rank_(\d+)\.json$")


def read_point(run_dir: str) -> dict:
    """The row of one run dir; a missing or unreadable file it needs makes it `incomplete`, naming the file."""
    problems: List[str] = []
    summary = _load(run_dir, SUMMARY, json.load, problems)
    if not isinstance(summary, dict) and not problems:  # it parsed, but as null, a list, a number
        problems.append("summary.json unreadable (not a JSON object)")
        summary = None
    if isinstance(summary, dict) and not summary_is_latest(run_dir):  # the latest launch was killed before writing one
        problems.append(f"the latest launch ended without writing summary.json (killed?); the one there is an "
                        f"earlier launch's ({summary.get('status')})")
    overrides = _load(run_dir, OVERRIDES, yaml.safe_load, problems, required=False) or []
    status = (summary or {}).get("status", "incomplete")
    plan = None
    if status != "skipped":  # plan.json is written before launch: a failed run has one too
        plan = _load(run_dir, PLAN, json.load, problems, required=status in ("completed", "failed", "stopped"))
    ranks = read_ranks(run_dir, summary.get("world_size") if status == "completed" else None, problems)
    row = build_row(run_dir, overrides, summary or {}, plan, ranks)
    if problems:
        row["status"] = "incomplete"
        row["reason"] = "; ".join(problems + ([row["reason"]] if row["reason"] else []))
    return row


def _load(run_dir: str, name: str, parse, problems: List[str], required: bool = True):
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        if required:
            problems.append(f"{name} missing")
        return None
    try:
        with open(path) as f:
            return parse(f)
    except (ValueError, yaml.YAMLError) as err:  # json's and yaml's parse errors: a half-written file
        problems.append(f"{name} unreadable ({str(err).splitlines()[0]})")
        return None


def read_ranks(run_dir: str, world_size: Optional[int], problems: List[str]) -> List[dict]:
    """memory/rank_K.json of every rank that wrote one; with world_size, missing ranks are problems."""
    pattern = os.path.join(glob.escape(run_dir), MEMORY_DIR, "rank_*.json")  # the run dir's name may hold [ * ?
    found = {int(RANK_FILE.search(p).group(1)): p for p in glob.glob(pattern)}
    wanted = range(world_size) if world_size else sorted(found)
    ranks = []
    for rank in wanted:
        loaded = _load(run_dir, memory_file(rank), json.load, problems)
        if loaded is not None:
            ranks.append(loaded)
    return ranks


def build_row(run_dir: str, overrides: List[str], summary: dict, plan: Optional[dict],
              ranks: Optional[List[dict]]) -> dict:
    """Pure: the files of one run, already parsed, as one flat row (bytes; None where there is nothing)."""
    row = {"run_dir": run_dir, "overrides": " ".join(overrides), "override_values": parse_overrides(overrides),
           "status": summary.get("status", "incomplete"), "reason": summary.get("reason", "")}
    row.update(estimated_columns(plan))
    row.update(measured_columns(ranks or []))
    for key in ("world_size", "final_loss", "eval_loss", "samples_per_second", "train_seconds", "wall_seconds"):
        row[key] = summary.get(key)
    return row


def parse_overrides(overrides: List[str]) -> Dict[str, str]:
    """["zero=stage2", "trainer.max_length=64"] -> {"zero": "stage2", "trainer.max_length": "64"}."""
    return dict(o.split("=", 1) if "=" in o else (o, "") for o in overrides)


def estimated_columns(plan: Optional[dict]) -> dict:
    if plan is None:
        return {"zero_stage": None, "offload": None, **{f"est_{k}": None for k in KINDS},
                "est_model_states": None, **{f"est_peak_{p}": None for p in PEAK_PARTS}, "est_peak": None}
    current = plan["current"]
    states = {k: sum(current["after_step_bytes"].get(k, {}).values()) for k in KINDS}
    parts = estimated_peak_parts(current, plan["cluster"])
    return {"zero_stage": current["zero_stage"], "offload": current["offload"],
            **{f"est_{k}": v for k, v in states.items()}, "est_model_states": sum(states.values()),
            **{f"est_peak_{p}": parts.get(p, 0) for p in PEAK_PARTS}, "est_peak": sum(parts.values())}


def estimated_peak_parts(current: dict, cluster: dict) -> Dict[str, int]:
    """The estimate's peak per rank by component, in the terms of the measurement it is compared with."""
    parts = dict(current["device_bytes"])
    if cluster["device"] == "cpu":  # CPU ranks: host_total is per node, and includes every rank's device terms
        parts["offloaded"] = current["host_total_bytes"] // cluster["gpus_per_node"] - current["device_total_bytes"]
    else:
        parts["overhead"] = max(0, parts.get("overhead", 0) - CUDA_CONTEXT_BYTES)
    return parts


def measured_columns(ranks: List[dict]) -> dict:
    states = [{k: sum(r["model_states"].get(k, {}).values()) for k in KINDS} for r in ranks]
    on_gpu = any("gpu_peak_reserved_bytes" in r for r in ranks)
    largest = lambda key: max((r[key] for r in ranks if key in r), default=None)  # noqa: E731
    row = {f"meas_{k}": max((s[k] for s in states), default=None) for k in KINDS}
    row["meas_model_states"] = max((sum(s.values()) for s in states), default=None)
    row["cpu_peak_rss"] = largest("peak_rss_bytes")
    row["gpu_peak_allocated"] = largest("gpu_peak_allocated_bytes")
    row["gpu_peak_reserved"] = largest("gpu_peak_reserved_bytes")
    row["meas_peak"] = row["gpu_peak_reserved"] if on_gpu else row["cpu_peak_rss"]
    row["peak_measure"] = ("gpu_reserved" if on_gpu else "cpu_rss") if ranks else None
    row["parameters"] = ranks[0].get("parameters") if ranks else None
    return row
