"""Benchmarks, side by side with what users do today: `python scripts/bench.py` prints one table and writes
docs/benchmarks.md; `--quick` runs one repetition of the fast parts (what `make test` checks).

1. time to a config error: the same mistake made in a hand-written TRL + DeepSpeed JSON script under torchrun
   (scripts/baseline_train.py, 2 CPU ranks, the tiny model) and with trl_ds;
2. dry-run latency and peak RSS, against `accelerate launch --help` and `deepspeed --help`;
3. the planner's default grid for llama3-70b;
4. training overhead: trl_ds's default run against the same training by hand (same ds_config.json), alternating;
5. a 4-stage sweep: wall time per point against a single run.
Medians of repeated runs (min/median/max shown); the two sides alternate, since this machine is shared and noisy.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)
sys.path.insert(0, REPO)
from trl_ds.launch import spawn_env  # noqa: E402

# Both sides run as from an activated venv: its torchrun, and its ninja for DeepSpeed's JIT ops (another ninja
# would rebuild them from scratch, see trl_ds/launch/build_ops.py).
ENV = spawn_env()


def timed(cmd, cwd=REPO):
    """Wall seconds, exit code, peak RSS (MiB) of the process tree's largest child, and its output."""
    with tempfile.TemporaryFile(mode="w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        return wall, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, out.read()


def stats(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def fmt(s, unit="s"):
    return f"{s['median']:.2f} {unit} (min {s['min']:.2f}, max {s['max']:.2f}, n={s['n']})"


def trl_ds(*overrides, run_dir):
    return [PY, "-m", "trl_ds", *overrides, f"hydra.run.dir={run_dir}"]


def baseline(ds_config, ref_dir, steps=10):
    return [os.path.join(BIN, "torchrun"), "--standalone", "--nproc_per_node", "2",
            os.path.join(REPO, "scripts", "baseline_train.py"), "--deepspeed", ds_config,
            "--model", os.path.join(ref_dir, "model"), "--dataset", os.path.join(ref_dir, "data"),
            "--steps", str(steps), "--output", os.path.join(os.path.dirname(ref_dir), "baseline_output")]


def reference_run(work):
    """One trl_ds run: its model folder, dataset and ds_config.json feed the hand-written side."""
    ref = os.path.join(work, "reference")
    wall, code, _, out = timed(trl_ds(run_dir=ref))
    assert code == 0, out
    return ref, wall


def bad_ds_configs(ref_dir, work):
    """The three mistakes, written into DeepSpeed JSON the way a user would."""
    with open(os.path.join(ref_dir, "ds_config.json")) as f:
        good = json.load(f)
    mistakes = {
        "batch size mismatch": {**good, "train_batch_size": 8},
        "param offload with stage 2": {**good, "zero_optimization": {
            **good["zero_optimization"], "offload_param": {"device": "cpu"}}},
        "NVMe path that does not exist": {**good, "zero_optimization": {
            "stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/proc/no/such/nvme"}},
            "aio": {"block_size": 1048576, "queue_depth": 8}},
    }
    paths = {}
    for name, cfg in mistakes.items():
        paths[name] = os.path.join(work, re.sub(r"\W+", "_", name) + ".json")
        with open(paths[name], "w") as f:
            json.dump(cfg, f)
    return paths


TRL_DS_MISTAKES = {
    "batch size mismatch": ["batch.global_size=8", "trainer.gradient_accumulation_steps=1"],
    "param offload with stage 2": ["zero=stage2", "offload.param=cpu"],
    "NVMe path that does not exist": ["zero=stage3", "offload=nvme", "offload.nvme_path=/proc/no/such/nvme"],
}


def bench_errors(ref_dir, work, quick, reps):
    """trl_ds's side is the median of `reps` runs (half a second each); the hand-written side runs once (it spawns
    ranks and builds the model, or trains to the end)."""
    rows = []
    configs = bad_ds_configs(ref_dir, work)
    for i, (name, overrides) in enumerate(TRL_DS_MISTAKES.items()):
        ours = [timed(trl_ds(*overrides, run_dir=os.path.join(work, f"err{i}"))) for _ in range(reps)]
        theirs = timed(baseline(configs[name], ref_dir)) if not quick or i == 0 else None
        rows.append({"mistake": name, "trl_ds_s": statistics.median(o[0] for o in ours),
                     "trl_ds_wall": stats([o[0] for o in ours]), "trl_ds_exit": exit_code([o[1] for o in ours]),
                     "baseline_s": theirs[0] if theirs else None, "baseline_exit": theirs[1] if theirs else None,
                     "baseline_caught": bool(theirs and theirs[1] != 0)})
    return rows


def exit_code(codes):
    """The one exit code every repetition gave, or all of them where they differ."""
    return codes[0] if len(set(codes)) == 1 else codes


def bench_latency(work, reps):
    cmds = {
        "trl_ds dry run (llama3-70b, 2x8, stage 3)": lambda i: trl_ds(
            "cluster=2x8", "zero=stage3", "model=llama3-70b", "dry_run=true", run_dir=os.path.join(work, f"dry{i}")),
        "accelerate launch --help": lambda i: [os.path.join(BIN, "accelerate"), "launch", "--help"],
        "deepspeed --help": lambda i: [os.path.join(BIN, "deepspeed"), "--help"],
        "trl_ds.plan (llama3-70b, 1x8, default grid)": lambda i: [PY, "-m", "trl_ds.plan", "model=llama3-70b",
                                                                    "cluster=1x8"],
    }
    walls = {name: [] for name in cmds}
    rss = {name: [] for name in cmds}
    for i in range(reps):  # interleaved, so drift hits every command alike
        for name, make in cmds.items():
            wall, _, peak, _ = timed(make(i))
            walls[name].append(wall)
            rss[name].append(peak)
    return {name: {"wall": stats(walls[name]), "rss_mib": max(rss[name])} for name in cmds}


def bench_overhead(ref_dir, work, reps):
    ours, theirs = [], []
    for i in range(reps):
        run_dir = os.path.join(work, f"overhead{i}")
        wall, code, _, out = timed(trl_ds(run_dir=run_dir))
        assert code == 0, out
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        ours.append((wall, summary["samples_per_second"], summary["final_loss"]))
        wall, code, _, out = timed(baseline(os.path.join(ref_dir, "ds_config.json"), ref_dir))
        assert code == 0, out
        result = json.loads(out.split("BASELINE ", 1)[1].splitlines()[0])
        theirs.append((wall, result["samples_per_second"], result["final_loss"]))
    return {"trl_ds_wall": stats([o[0] for o in ours]), "baseline_wall": stats([t[0] for t in theirs]),
            "trl_ds_sps": stats([o[1] for o in ours]), "baseline_sps": stats([t[1] for t in theirs]),
            "trl_ds_loss": sorted({round(o[2], 6) for o in ours}),
            "baseline_loss": sorted({round(t[2], 6) for t in theirs})}


def bench_sweep(work, single_wall):
    sweep_dir = os.path.join(work, "sweep")
    wall, code, _, out = timed([PY, "-m", "trl_ds", "-m", "zero=stage0,stage1,stage2,stage3",
                                f"hydra.sweep.dir={sweep_dir}"])
    assert code == 0, out
    return {"points": 4, "wall": wall, "per_point": wall / 4, "single_run": single_wall}


def machine():
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    versions = {p: metadata.version(p) for p in ("torch", "deepspeed", "trl", "transformers", "accelerate",
                                                 "hydra-core")}
    return {"cores": os.cpu_count(), "memory_gib": round(mem, 1), "python": platform.python_version(), **versions}


def render(result):
    m = result["machine"]
    lines = ["# trl_ds benchmarks", "", f"Machine: {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, "
             + ", ".join(f"{k} {v}" for k, v in m.items() if k not in ("cores", "memory_gib", "python")) + ".",
             f"Generated by `python scripts/bench.py{' --quick' if result['quick'] else ''}` on {result['date']}.", "",
             "## 1. Time to a config error", "",
             "| mistake | hand-written TRL + DeepSpeed under torchrun | trl_ds | ratio |", "|---|---|---|---|"]
    for r in result["errors"]:
        if r["baseline_s"] is None:
            base, ratio = "not run (--quick)", "–"
        elif r["baseline_caught"]:
            base, ratio = f"{r['baseline_s']:.1f} s, after spawning 2 ranks", f"{r['baseline_s'] / r['trl_ds_s']:.0f}×"
        else:
            base, ratio = f"never: trained for {r['baseline_s']:.1f} s and ignored it", "∞"
        lines.append(f"| {r['mistake']} | {base} | {fmt(r['trl_ds_wall'])}, exit {r['trl_ds_exit']} | {ratio} |")
    lines += ["", "## 2-3. Dry-run and planner latency", "", "| command | wall (median) | peak RSS |", "|---|---|---|"]
    for name, v in result["latency"].items():
        lines.append(f"| {name} | {fmt(v['wall'])} | {v['rss_mib']:.0f} MiB |")
    if "overhead" in result:
        o = result["overhead"]
        lines += ["", "## 4. Training overhead (default tiny run, 2 CPU ranks, ZeRO-2)", "",
                  "| | trl_ds | by hand | ratio |", "|---|---|---|---|",
                  f"| wall | {fmt(o['trl_ds_wall'])} | {fmt(o['baseline_wall'])} | "
                  f"{o['trl_ds_wall']['median'] / o['baseline_wall']['median']:.3f} |",
                  f"| samples/s | {o['trl_ds_sps']['median']:.1f} | {o['baseline_sps']['median']:.1f} | "
                  f"{o['trl_ds_sps']['median'] / o['baseline_sps']['median']:.3f} |",
                  f"| final loss | {o['trl_ds_loss']} | {o['baseline_loss']} | equal: "
                  f"{o['trl_ds_loss'] == o['baseline_loss']} |"]
    if "sweep" in result:
        s = result["sweep"]
        lines += ["", "## 5. Sweep", "",
                  f"`python -m trl_ds -m zero=stage0,stage1,stage2,stage3`: {s['wall']:.1f} s for "
                  f"{s['points']} points, {s['per_point']:.1f} s per point against {s['single_run']:.1f} s for a "
                  f"single run ({s['per_point'] / s['single_run']:.2f}×)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repetition of the fast parts")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks.md"))
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    with tempfile.TemporaryDirectory() as work:
        ref_dir, single_wall = reference_run(work)
        result = {"machine": machine(), "quick": args.quick, "date": time.strftime("%Y-%m-%d"),
                  "errors": bench_errors(ref_dir, work, args.quick, max(reps, 3)),
                  "latency": bench_latency(work, max(reps, 3))}
        if not args.quick:
            result["overhead"] = bench_overhead(ref_dir, work, reps)
            result["sweep"] = bench_sweep(work, single_wall)
    text = render(result)
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
