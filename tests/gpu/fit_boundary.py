"""`python tests/gpu/fit_boundary.py OUT [--cpu-smoke]`: the fit-boundary study, time-boxed (`tests/gpu/gpu_check.sh OUT
--fit` runs it, with the GPU check's installation and environment).

On one CUDA GPU, for each case (a model built from a preset's dimensions with random weights, a GPU size set with
cluster.gpu_memory_gb, which caps the rank there, a ZeRO stage and an offload), one `trl-ds fit` process: the
planner's largest micro-batch that fits, the largest that trains 3 steps of 512 tokens (one engine, out-of-memory
errors caught), and the peak reserved memory over the estimate at the measured one. Cases run most informative
first, each killed at RUN_TIMEOUT, none started after DEADLINE (the GPU check's limits and its preparation: the
import probe, DeepSpeed's op builds, the model folders, the full-length dataset).

`--cpu-smoke`: one case of the tiny model at ZeRO-3 on one CPU rank, where nothing runs out of memory within a cap,
so the search is bounded (--limit) and an out-of-memory error is raised inside the forward above a size
(--simulate-oom-above): the engine must survive it and train on.

OUT gets, after every case: fit_boundary.json (one object per case: model, gpu_memory_gb, zero, offload,
planner_max_micro, measured_max_micro, reserved_over_estimate), results.json (that and every trial), report.md,
failures.log, runs.tar.gz (each case's run dir, fit.json included).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo
from tests.gpu import gpu_check  # noqa: E402
from tests.gpu.gpu_check import Check, Mode, dataset_path, limits, model_folder, num, read_json, run_dir  # noqa: E402

GiB = 2 ** 30
SMOKE_FIT_ARGS = ["--steps", "2", "--start", "2", "--limit", "8", "--simulate-oom-above", "5"]


@dataclass
class FitMode(Mode):
    cases: List[Tuple[str, float, int, str]] = field(default_factory=list)  # (model key, GiB, stage, offload)
    fit_args: List[str] = field(default_factory=list)  # passed to every `trl-ds fit`


def gpu_mode() -> FitMode:
    llama, qwen = "llama3.2-1b", "qwen2.5-0.5b"
    # Where the planner says something fits without offload, that case; where only offload fits, with it
    cases = [(qwen, 24, 2, "none"), (llama, 24, 2, "cpu"), (qwen, 24, 3, "none"), (llama, 16, 2, "cpu"),
             (qwen, 16, 2, "cpu"), (llama, 24, 3, "cpu"), (qwen, 16, 2, "none"), (llama, 40, 2, "none"),
             (qwen, 16, 3, "cpu"), (llama, 16, 3, "cpu")]
    common = ["cluster=1x1", "cluster.gpu=h200-141gb", "precision=bf16", "trainer.max_length=512"]
    return FitMode("fit-gpu", {llama: llama, qwen: qwen}, [], common,
                   {"fused_adam": "FusedAdamBuilder", "cpu_adam": "CPUAdamBuilder"}, "h200-141gb",
                   **limits(run_timeout=150, start_deadline=465, hard_end=525), prep_timeout=240, cases=cases,
                   fit_args=["--steps", "3"])


def cpu_mode() -> FitMode:
    common = ["cluster=local", "cluster.gpus_per_node=1", "precision=fp32", "trainer.max_length=64"]
    return FitMode("fit-cpu-smoke", {"tiny": "tiny"}, [], common, {}, "cpu",
                   **limits(run_timeout=300, start_deadline=600, hard_end=840), prep_timeout=300,
                   cases=[("tiny", 0, 3, "none")], fit_args=SMOKE_FIT_ARGS)


class FitCheck(Check):
    """The GPU check's bookkeeping, with cases instead of runs and the study's own files."""

    def __init__(self, out: str, work: str, mode: FitMode, started: float):
        super().__init__(out, work, mode, started)
        self.results["cases"] = []

    def save(self) -> None:
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        gpu_check.write_atomic(os.path.join(self.out, "results.json"), json.dumps(self.results, indent=2) + "\n")
        gpu_check.write_atomic(os.path.join(self.out, "fit_boundary.json"),
                               json.dumps([table_row(c) for c in self.results["cases"]], indent=2) + "\n")
        gpu_check.write_atomic(os.path.join(self.out, "report.md"), render_report(self.results))
        self.pack_runs()


TABLE_KEYS = ("model", "gpu_memory_gb", "zero", "offload", "planner_max_micro", "measured_max_micro",
              "reserved_over_estimate")


def table_row(case: dict) -> dict:
    return {k: case.get(k) for k in TABLE_KEYS}


def case_name(model: str, gb: float, stage: int, offload: str) -> str:
    return f"fit_{model}_{gb:g}gb_s{stage}_{offload}"


def case_command(check: FitCheck, py: str, entry: dict) -> List[str]:
    overrides = [*check.mode.common, f"model={check.mode.models[entry['model']]}",
                 f"model.name_or_path={model_folder(check, entry['model'])}", f"zero=stage{entry['zero']}",
                 f"offload={entry['offload']}", f"trainer.dataset_name={dataset_path(check)}"]
    if entry["gpu_memory_gb"]:
        overrides.append(f"cluster.gpu_memory_gb={entry['gpu_memory_gb']:g}")
    return [py, "-m", "trl_ds.cli", "fit", *overrides, *check.mode.fit_args, "--run-dir",
            run_dir(check, entry["name"]), "--json"]


def run_cases(check: FitCheck, py: str) -> None:
    for model, gb, stage, offload in check.mode.cases:
        entry = {"name": case_name(model, gb, stage, offload), "model": model, "gpu_memory_gb": gb, "zero": stage,
                 "offload": offload}
        check.results["cases"].append(entry)
        gpu_check.run_unless_skipped(check, py, entry, run_case)


def run_case(check: FitCheck, py: str, entry: dict) -> None:
    log = os.path.join(check.work, "logs", f"{entry['name']}.log")
    rc = gpu_check.run_timed(check, case_command(check, py, entry), log, entry)
    fit = read_json(os.path.join(run_dir(check, entry["name"]), "fit.json")) or {}
    entry.update(read_fit(fit))
    entry["status"] = "timeout" if rc is None else "completed" if rc == 0 and "measured_max_micro" in fit else \
        "failed"
    if rc is None:  # what the trials so far say: the boundary lies at or above the largest that trained
        entry["reason"] = f"killed after {entry['wall_s']} s, {len(entry['trials'])} trials"
    if entry["status"] != "completed":
        check.note_failure(f"case {entry['name']} {entry['status']}", log)


def read_fit(fit: dict) -> dict:
    trials = fit.get("trials", [])
    at = fit.get("at_max") or {}
    return {"planner_max_micro": fit.get("planner_max_micro"), "measured_max_micro": fit.get("measured_max_micro",
            max((t["micro_batch"] for t in trials if t["status"] == "trained"), default=None)),
            "reserved_over_estimate": fit.get("reserved_over_estimate"), "bounded_by_limit": fit.get(
            "bounded_by_limit"), "smallest_oom_micro": fit.get("smallest_oom_micro"),
            "estimate_at_max_bytes": fit.get("estimate_at_max_bytes"),
            "peak_reserved_at_max_bytes": at.get("peak_reserved_bytes"),
            "peak_allocated_at_max_bytes": at.get("peak_allocated_bytes"), "engine_builds": fit.get("engine_builds"),
            "trials": [{k: t.get(k) for k in ("micro_batch", "status", "steps", "peak_reserved_bytes", "error",
                                              "confirm") if k in t} for t in trials]}


def trial_marks(trials: List[dict]) -> str:
    return " ".join(f"{t['micro_batch']}" + ("" if t["status"] == "trained" else "!") for t in trials)


def render_report(r: dict) -> str:
    env = r.get("env") or {}
    lines = [f"# trl_ds fit boundary ({r['mode']})", "",
             f"Device: {env.get('gpu', {}).get('name', 'no GPU')}; elapsed {r.get('elapsed_s', 0):.0f} s.", "",
             "| case | status | planner max | measured max | smallest OOM | reserved at max GiB | est. at max GiB "
             "| reserved / est. | trials | engines |", "|" + "---|" * 10]
    for c in r["cases"]:
        status = c["status"] + (f": {c['reason']}"[:80] if c.get("reason") else "")
        reserved, est = c.get("peak_reserved_at_max_bytes"), c.get("estimate_at_max_bytes")
        lines.append(" | ".join([
            f"| {c['name']}", status, num(c.get("planner_max_micro"), "{}"), num(c.get("measured_max_micro"), "{}")
            + (" (limit)" if c.get("bounded_by_limit") else ""), num(c.get("smallest_oom_micro"), "{}"),
            num(reserved and reserved / GiB, "{:.2f}"), num(est and est / GiB, "{:.2f}"),
            num(c.get("reserved_over_estimate")), trial_marks(c.get("trials", [])),
            num(c.get("engine_builds"), "{}")]) + " |")
    lines += ["", "trials: micro-batches in the order tried; ! ran out of memory (or failed)."]
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python tests/gpu/fit_boundary.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder for fit_boundary.json, results.json, report.md, failures.log, runs.tar.gz")
    parser.add_argument("--cpu-smoke", action="store_true", help="one bounded case of the tiny model on a CPU rank")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "trl_ds_gpu_check"),
                        help="run dirs and model folders (default: %(default)s, shared with the GPU check)")
    args = parser.parse_args(argv)
    out, work = os.path.abspath(args.out), os.path.abspath(args.work)
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)
    started = float(os.environ.get("GPU_CHECK_STARTED") or time.time())
    check = FitCheck(out, work, cpu_mode() if args.cpu_smoke else gpu_mode(), started)
    if gpu_check.prepare(check, sys.executable):
        run_cases(check, sys.executable)
    check.save()
    print(render_report(check.results))
    return 0 if any(c.get("status") == "completed" for c in check.results["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
