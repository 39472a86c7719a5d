"""`python scripts/bench/bench.py --vs-accelerate`: one user train.py (scripts/bench/bench_user_train.py) through
trl_ds and through `accelerate launch --config_file <the trl package's accelerate_configs/zero2.yaml>`, 2 CPU ranks,
ZeRO-2.

Both sides get the same model (the tiny one trl_ds builds from the seed), the same data file, and the same
TrainingArguments: the flags trl_ds gives an HfArgumentParser script (trl_ds/worker/script_argv.py), read from a
warm-up trl_ds run, less `--deepspeed` (accelerate's side takes ZeRO from the YAML) and with its own output_dir. The
YAML's `mixed_precision: bf16` is overridden by `--mixed_precision no` (with `--bf16 false`, transformers refuses the
mismatch on every rank); without `--cpu`, which would take accelerate's one-process launcher instead of DeepSpeed's.

Runs alternate, n each, after a warm-up trl_ds run: the script's first launch with these arguments, which asks
its parser (reported on its own); the measured trl_ds launches read that verdict back. Per run: seconds from the
launching process's start to the first step's begin (the script's callback), samples/s over steps 2..N (the first
step's one-off costs left out), the whole wall. Then one mistake both sides can be given, `--learning_rate fast`,
alternating the same way: trl_ds refuses it before spawning, accelerate's ranks refuse it after spawning.
"""
import glob
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo
from scripts.bench.timing import BIN, REPO, fmt, load, machine, stats, timed, trl_ds  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "bench", "bench_user_train.py")
STEPS = 30
OVERRIDES = ["zero=stage2", f"trainer.max_steps={STEPS}"]
MISTAKE = ["--learning_rate", "fast"]


def trl_zero2_yaml():
    import trl

    return os.path.join(os.path.dirname(trl.__file__), "accelerate_configs", "zero2.yaml")


def data_args(run_dir):
    """The tiny model and data file trl_ds writes into a run dir, named as the script's own arguments."""
    return ["--model", os.path.join(run_dir, "model"), "--data_file", os.path.join(run_dir, "data", "train.jsonl")]


def trl_ds_side(run_dir, extra=()):
    args = ",".join([*data_args(run_dir), *extra])
    return trl_ds(f"script={SCRIPT}", *OVERRIDES, f"script_args=[{args}]", run_dir=run_dir)


def accelerate_flags(trl_ds_flags, output_dir):
    """The TrainingArguments flags trl_ds gives the script, for accelerate's side: no --deepspeed (the YAML's ZeRO
    config is the point), and an output_dir of its own."""
    flags, after = [], None
    for token in trl_ds_flags:
        if after == "--deepspeed":
            flags.pop()
        elif after == "--output_dir":
            token = output_dir
        if after != "--deepspeed":
            flags.append(token)
        after = token
    return flags


def accelerate_side(flags, ref_dir, output_dir, extra=()):
    return [os.path.join(BIN, "accelerate"), "launch", "--config_file", trl_zero2_yaml(), "--num_processes", "2",
            "--mixed_precision", "no", SCRIPT, *accelerate_flags(flags, output_dir), *data_args(ref_dir), *extra]


def step_figures(stamps, started):
    """Seconds from the process start to the first step, and samples/s over steps 2..N."""
    ends = stamps["step_ends"]
    return {"first_step_s": stamps["first_step_begin"] - started,
            "samples_per_s": (len(ends) - 1) * stamps["samples_per_step"] / (ends[-1] - ends[0])}


def refusal(output):
    """The line that names the mistake: argparse's `error:` line, else the last line printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    named = [line for line in lines if "error: argument" in line or line.startswith("trl_ds:")]
    return (named or lines or [""])[-1]


def last_exception(output):
    """The last exception a traceback names (torchrun's ChildFailedError for accelerate's ranks), or None."""
    found = re.findall(r"^([\w.]+(?:Error|Exception))\b", output, re.MULTILINE)
    return found[-1] if found else None


def ranks_started(output, run_dir=None):
    """trl_ds: the ranks' log folders in its run dir; accelerate: the failed ranks torchrun's summary lists."""
    if run_dir is not None:
        return len(glob.glob(os.path.join(run_dir, "logs", "node_*", "*", "attempt_*", "*")))
    return len(re.findall(r"rank\s+: \d+ \(local_rank: \d+\)", output))


def timed_run(cmd, stamps_file):
    """The run's figures once it trained every step. Its exit code is kept, not asserted: under `accelerate launch` a
    script that never ends its process group can abort at exit after training ("terminate called without an active
    exception", gloo's threads), which the page reports."""
    started = time.time()
    wall, code, _, out = timed(cmd)
    assert os.path.exists(stamps_file), out[-3000:]
    with open(stamps_file) as f:
        stamps = json.load(f)
    assert len(stamps["step_ends"]) == STEPS, out[-3000:]
    return {"wall_s": wall, **step_figures(stamps, started), "exit": code}


def bench_training(work, flags, ref_dir, reps):
    runs = {"trl_ds": [], "accelerate": []}
    for i in range(reps):  # alternating, so drift in the machine's load hits both sides alike
        run_dir = os.path.join(work, f"trl_ds{i}")
        runs["trl_ds"].append(timed_run(trl_ds_side(run_dir), os.path.join(run_dir, "trainer", "step_stamps.json")))
        out_dir = os.path.join(work, f"accelerate{i}")
        runs["accelerate"].append(timed_run(accelerate_side(flags, ref_dir, out_dir),
                                            os.path.join(out_dir, "step_stamps.json")))
    return {side: {**{key: stats([r[key] for r in rs]) for key in rs[0] if key != "exit"},
                   "exits": [r["exit"] for r in rs]} for side, rs in runs.items()}


def bench_mistake(work, flags, ref_dir, reps):
    sides = {"trl_ds": lambda i: (trl_ds_side(os.path.join(work, f"bad{i}"), MISTAKE), os.path.join(work, f"bad{i}")),
             "accelerate": lambda i: (accelerate_side(flags, ref_dir, os.path.join(work, f"bad_acc{i}"), MISTAKE),
                                      None)}
    result = {side: {"walls": [], "codes": set(), "spawned": set()} for side in sides}
    for i in range(reps):
        for side, make in sides.items():
            cmd, run_dir = make(i)
            wall, code, _, out = timed(cmd)
            r = result[side]
            r["walls"].append(wall)
            r["codes"].add(code)
            r["spawned"].add(ranks_started(out, run_dir))
            r["says"] = refusal(out).replace(work, "<tmp>").replace(REPO + "/", "")  # the page names no one's folders
            r["lines"] = len([line for line in out.splitlines() if line.strip()])
            r["exception"] = last_exception(out)
    return {side: {"wall": stats(r["walls"]), "exit": sorted(r["codes"]), "ranks_started": sorted(r["spawned"]),
                   "says": r["says"], "lines_printed": r["lines"], "exception": r["exception"]}
            for side, r in result.items()}


def ratio_text(ours, theirs):
    """trl_ds / accelerate on medians, and whether the min-max spreads overlap (then it is within the noise)."""
    overlap = not (ours["max"] < theirs["min"] or theirs["max"] < ours["min"])
    return f"{ours['median'] / theirs['median']:.2f}" + (" (spreads overlap: within the noise)" if overlap else
                                                         " (spreads apart)")


def render(result):
    t, m = result["training"], result["mistake"]
    lines = ["# trl_ds against `accelerate launch`, one user train.py", "",
             f"Generated by `{result['command']}` on {result['date']}; load average (1/5/15 min) "
             f"{result['load_before']} before, {result['load_after']} after. "
             + ", ".join(f"{k} {v}" for k, v in result["machine"].items()) + ".", "",
             f"The script: scripts/bench/bench_user_train.py. 2 CPU ranks, ZeRO-2, the tiny model, {STEPS} steps of "
             "global batch 4; runs alternate; medians with (min, max).", "",
             "| | trl_ds | accelerate launch (trl's zero2.yaml) | trl_ds / accelerate |", "|---|---|---|---|"]
    for key, name in (("first_step_s", "seconds to the first step"), ("samples_per_s", "samples/s, steps 2..N"),
                      ("wall_s", "wall, start to exit")):
        lines.append(f"| {name} | {fmt(t['trl_ds'][key], '')} | {fmt(t['accelerate'][key], '')} | "
                     f"{ratio_text(t['trl_ds'][key], t['accelerate'][key])} |")
    lines.append(f"| exit codes, in run order | {t['trl_ds']['exits']} | {t['accelerate']['exits']} | |")
    first = result["first_launch"]
    lines += ["", "Each trl_ds launch above read its parser's accepted verdict back. The warm-up before them was this "
              "script's first launch with these arguments, where trl_ds asks the parser (one interpreter that imports "
              f"transformers and TRL): first step after {first['first_step_s']:.2f} s, wall {first['wall_s']:.2f} s "
              "(one run, machine's file cache cold)."]
    lines += ["", f"A mistake both sides are given, `{' '.join(MISTAKE)}` among the script's arguments:", "",
              "| | trl_ds | accelerate launch |", "|---|---|---|"]
    lines.append(f"| answered after | {fmt(m['trl_ds']['wall'])} | {fmt(m['accelerate']['wall'])} |")
    lines.append(f"| exit code | {m['trl_ds']['exit']} | {m['accelerate']['exit']} |")
    lines.append(f"| ranks started | {m['trl_ds']['ranks_started']} | {m['accelerate']['ranks_started']} |")
    lines.append(f"| names the mistake | `{m['trl_ds']['says']}` | `{m['accelerate']['says']}` |")
    lines.append(f"| lines printed (last run) | {m['trl_ds']['lines_printed']} | {m['accelerate']['lines_printed']} |")
    lines.append(f"| last exception named | {m['trl_ds']['exception'] or 'none'} | {m['accelerate']['exception']} |")
    return "\n".join(lines) + "\n"


def main(args):
    import tempfile

    from trl_ds.worker.script_argv import resolved_trainer_args, training_flags

    with tempfile.TemporaryDirectory() as work:
        result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "load_before": load(),
                  "command": f"python scripts/bench/bench.py --vs-accelerate --reps {args.reps}"}
        # an empty cache: the warm-up is this script's first launch with these arguments, so its parser is asked;
        # the launches measured after it read the accepted verdict back (trl_ds/check/parser_cache.py)
        os.environ["TRL_DS_CACHE"] = os.path.join(work, "cache")
        ref_dir = os.path.join(work, "warm_up")  # the model, data and flags both sides get; warms the file cache
        result["first_launch"] = timed_run(trl_ds_side(ref_dir), os.path.join(ref_dir, "trainer", "step_stamps.json"))
        flags = training_flags(resolved_trainer_args(ref_dir))
        result["training"] = bench_training(work, flags, ref_dir, args.reps)
        result["mistake"] = bench_mistake(work, flags, ref_dir, args.reps)
        result["load_after"] = load()
    text = render(result)
    print(text)
    out = args.out or os.path.join(REPO, "docs", "benchmarks-accelerate.md")
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    print("run it as: python scripts/bench/bench.py --vs-accelerate", file=sys.stderr)
    sys.exit(2)
