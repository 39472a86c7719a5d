"""Benchmarks, side by side with what users do today: `python scripts/bench/bench.py` prints one table and writes
docs/benchmarks.md; `--quick` runs one repetition of the fast parts (what `make test` checks).

1. time to a config error: the same mistake made in a hand-written TRL + DeepSpeed JSON script under torchrun
   (scripts/bench/baseline_train.py, 2 CPU ranks, the tiny model) and with trl_ds;
2. dry-run latency and peak RSS, against `accelerate launch --help` and `deepspeed --help`;
3. the planner's default grid for llama3-70b;
4. training overhead: trl_ds's default run against the same training by hand (same ds_config.json), alternating;
5. a 4-stage sweep: wall time per point against a single run.
`--vs-accelerate` runs instead one user train.py through trl_ds and through `accelerate launch` with the trl package's
zero2.yaml (scripts/bench/bench_accelerate.py), and writes docs/benchmarks-accelerate.md.
Both sides are timed alike: alternating runs, n each (--reps, default 5), medians with min and max. A ratio is printed
only where the two spreads do not overlap; otherwise the row says "no difference measured". The report states the
machine's load average before and after, and whether each goal (GOALS) was met.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo
from scripts.bench.timing import BIN, PY, REPO, compare, fmt, load, machine, stats, timed, trl_ds  # noqa: E402


def baseline(ds_config, ref_dir, steps=10):
    return [os.path.join(BIN, "torchrun"), "--standalone", "--nproc_per_node", "2",
            os.path.join(REPO, "scripts", "bench", "baseline_train.py"), "--deepspeed", ds_config,
            "--model", os.path.join(ref_dir, "model"), "--dataset", os.path.join(ref_dir, "data"),
            "--steps", str(steps), "--output", os.path.join(os.path.dirname(ref_dir), "baseline_output")]


# The tiny model folder as a default run's first rank writes it (trl_ds/worker/train.py prepare_tiny_model)
SAVE_TINY_MODEL = """
import sys
from trl_ds.config.compose import compose
from trl_ds.worker.models import save_tiny_model
cfg = compose([])
save_tiny_model(cfg.model, sys.argv[1], cfg.seed)
"""


def reference_run(work):
    """A default run's model folder, dataset and ds_config.json feed the hand-written side: the dry run writes the
    dataset and the ds_config.json a launch writes, and the model folder is built as the launch's first rank builds
    it (a training launch costs ~16 s of CPU for these files, written before it trains)."""
    ref = os.path.join(work, "reference")
    for cmd in (trl_ds("dry_run=true", run_dir=ref), [PY, "-c", SAVE_TINY_MODEL, os.path.join(ref, "model")]):
        _, code, _, out = timed(cmd)
        assert code == 0, out
    return ref


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
    """Each mistake `reps` times on both sides, alternating. --quick times the hand-written side once, for the first
    mistake only (it spawns ranks and builds the model, or trains to the end: seconds each)."""
    rows = []
    configs = bad_ds_configs(ref_dir, work)
    for i, (name, overrides) in enumerate(TRL_DS_MISTAKES.items()):
        ours, theirs = [], []
        for rep in range(reps):
            ours.append(timed(trl_ds(*overrides, run_dir=os.path.join(work, f"err{i}"))))
            if not quick or (i == 0 and rep == 0):
                theirs.append(timed(baseline(configs[name], ref_dir)))
        row = {"mistake": name, "trl_ds_s": statistics.median(o[0] for o in ours),
               "trl_ds_wall": stats([o[0] for o in ours]), "trl_ds_exit": exit_code([o[1] for o in ours]),
               "baseline_s": None, "baseline_caught": False}
        if theirs:
            row.update(baseline_s=statistics.median(t[0] for t in theirs), baseline_wall=stats([t[0] for t in theirs]),
                       baseline_exit=exit_code([t[1] for t in theirs]), baseline_caught=all(t[1] != 0 for t in theirs))
        rows.append(row)
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


def bench_sweep(work, reps):
    """A 4-point sweep's wall per point against a single default run, alternating, `reps` times each."""
    per_point, single = [], []
    for i in range(reps):
        wall, code, _, out = timed([PY, "-m", "trl_ds", "-m", "zero=stage0,stage1,stage2,stage3",
                                    f"hydra.sweep.dir={os.path.join(work, f'sweep{i}')}"])
        assert code == 0, out
        per_point.append(wall / 4)
        wall, code, _, out = timed(trl_ds(run_dir=os.path.join(work, f"single{i}")))
        assert code == 0, out
        single.append(wall)
    return {"points": 4, "per_point": stats(per_point), "single_run": stats(single)}


# The goals the benchmarks check (issue #21): a config mistake answered in under 1 s and at least 10x sooner than the
# hand-written launch; the dry run and the planner under 1 s; a trl_ds run at most 1.10x the wall of the same training
# by hand.
GOALS = {"error_s": 1.0, "error_speedup": 10.0, "latency_s": 1.0, "wall_ratio": 1.10}


def goals_met(result):
    """{goal: bool}; a ratio goal counts as met only on medians (the spreads are printed beside it)."""
    errors = result["errors"]
    caught = [r for r in errors if r["baseline_s"] is not None and r["baseline_caught"]]
    latency = result["latency"]
    met = {"config error < 1 s": all(r["trl_ds_wall"]["median"] < GOALS["error_s"] for r in errors),
           "config error >= 10x sooner": bool(caught) and all(
               r["baseline_s"] / r["trl_ds_s"] >= GOALS["error_speedup"] for r in caught),
           "dry run and planner < 1 s": all(v["wall"]["median"] < GOALS["latency_s"] for k, v in latency.items()
                                             if k.startswith("trl_ds"))}
    if "overhead" in result:
        o = result["overhead"]
        met["training wall <= 1.10x by hand"] = \
            o["trl_ds_wall"]["median"] <= GOALS["wall_ratio"] * o["baseline_wall"]["median"]
    return met


def render(result):
    m = result["machine"]
    lines = ["# trl_ds benchmarks", "", f"Machine: {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, "
             + ", ".join(f"{k} {v}" for k, v in m.items() if k not in ("cores", "memory_gib", "python")) + ".",
             f"Generated by `python scripts/bench/bench.py{' --quick' if result['quick'] else ''}` on "
             f"{result['date']}; "
             f"load average (1/5/15 min) {result['load_before']} before, {result['load_after']} after.",
             "Both sides alternate, n runs each; medians with (min, max). A ratio is given only where the two spreads "
             "do not overlap.", "A user's own train.py through trl_ds and through `accelerate launch` (trl's "
             "zero2.yaml): [benchmarks-accelerate.md](benchmarks-accelerate.md), by `--vs-accelerate`.",
             "", "## Goals", ""]
    lines += [f"- {goal}: {'met' if ok else 'NOT met'}" for goal, ok in result["goals"].items()]
    lines += ["", "## 1. Time to a config error", "",
              "| mistake | hand-written TRL + DeepSpeed under torchrun | trl_ds | ratio |", "|---|---|---|---|"]
    for r in result["errors"]:
        if r["baseline_s"] is None:
            base, ratio = "not run (--quick)", "–"
        elif r["baseline_caught"]:
            base, ratio = f"{fmt(r['baseline_wall'])}, after spawning 2 ranks", \
                compare(r["trl_ds_wall"], r["baseline_wall"], 0)
        else:
            base, ratio = f"never: trained for {fmt(r['baseline_wall'])} and ignored it", "∞"
        lines.append(f"| {r['mistake']} | {base} | {fmt(r['trl_ds_wall'])}, exit {r['trl_ds_exit']} | {ratio} |")
    lines += ["", "## 2-3. Dry-run and planner latency", "", "| command | wall | peak RSS |", "|---|---|---|"]
    for name, v in result["latency"].items():
        lines.append(f"| {name} | {fmt(v['wall'])} | {v['rss_mib']:.0f} MiB |")
    if "overhead" in result:
        o = result["overhead"]
        lines += ["", "## 4. Training overhead (default tiny run, 2 CPU ranks, ZeRO-2)", "",
                  "| | trl_ds | by hand | by hand / trl_ds |", "|---|---|---|---|",
                  f"| wall | {fmt(o['trl_ds_wall'])} | {fmt(o['baseline_wall'])} | "
                  f"{compare(o['trl_ds_wall'], o['baseline_wall'], 3)} |",
                  f"| samples/s | {fmt(o['trl_ds_sps'], '')} | {fmt(o['baseline_sps'], '')} | "
                  f"{compare(o['trl_ds_sps'], o['baseline_sps'], 3)} |",
                  f"| final loss | {o['trl_ds_loss']} | {o['baseline_loss']} | equal: "
                  f"{o['trl_ds_loss'] == o['baseline_loss']} |"]
    if "sweep" in result:
        s = result["sweep"]
        lines += ["", "## 5. Sweep", "",
                  f"`python -m trl_ds -m zero=stage0,stage1,stage2,stage3` ({s['points']} points): "
                  f"{fmt(s['per_point'])} per point; a single run: {fmt(s['single_run'])}; single / per point: "
                  f"{compare(s['per_point'], s['single_run'])}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repetition of the fast parts")
    parser.add_argument("--reps", type=int, default=5, help="runs per side and benchmark (at least 5 for the docs)")
    parser.add_argument("--out", help="default docs/benchmarks.md (--vs-accelerate: docs/benchmarks-accelerate.md)")
    parser.add_argument("--vs-accelerate", action="store_true",
                        help="only the side by side of a user train.py with `accelerate launch` (trl's zero2.yaml)")
    args = parser.parse_args(argv)
    if args.vs_accelerate:
        from scripts.bench import bench_accelerate

        return bench_accelerate.main(args)
    args.out = args.out or os.path.join(REPO, "docs", "benchmarks.md")
    reps = 1 if args.quick else args.reps
    with tempfile.TemporaryDirectory() as work:
        result = {"machine": machine(), "quick": args.quick, "date": time.strftime("%Y-%m-%d"), "load_before": load()}
        ref_dir = reference_run(work)
        result["errors"] = bench_errors(ref_dir, work, args.quick, max(reps, 3))
        result["latency"] = bench_latency(work, max(reps, 3))
        if not args.quick:
            result["overhead"] = bench_overhead(ref_dir, work, reps)
            result["sweep"] = bench_sweep(work, reps)
        result["load_after"] = load()
        result["goals"] = goals_met(result)
    text = render(result)
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
