"""`trl-ds fit [overrides] [--steps 3] [--limit N] [--start N] [--run-dir DIR] [--json]`: the largest micro-batch
that really trains on this node's GPU, measured in one start-up, beside the planner's answer.

    trl-ds fit model=llama3.2-1b cluster=1x1 cluster.gpu_memory_gb=24 zero=stage2 precision=bf16

Same overrides as `trl-ds run`, for one rank: the search starts at the planner's largest micro-batch that fits, in
one process that builds the trainer and engine once (trl_ds/worker/fit.py). cluster.gpu_memory_gb below the GPU's
memory caps the rank there. The run dir (default outputs/fit/<time>) keeps fit.json: every trial, the measured and
planned largest micro-batch, and the peak reserved memory over the estimate. A command of its own, not a plan
option: plan answers in a fraction of a second without torch; this needs the GPU node and minutes.
"""
import argparse
import os
import socket
import subprocess
import sys
from dataclasses import replace
from typing import List, Optional, Sequence

from trl_ds.config.values import value
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.plan.memory import GiB, Setup, estimate, setup_from_config
from trl_ds.rundir.layout import read_json, write_json
from trl_ds.worker.fit import ENGINE_BROKEN, FIT_FILE, next_micro

SEARCHED = ("sft", "dpo")  # trainers whose step trl-ds fit has run (GRPO's batch is whole generation groups)
RESTARTS = 3  # fresh processes after an engine that an out-of-memory error left unusable
FORCED = ("trainer.gradient_accumulation_steps=1", "batch.global_size=null", "save_final_model=false",
          "preflight.memory=warn")  # one micro-step per optimizer step; a start above the plan is the user's to try


def planner_max_micro(base: Setup, limit: int) -> int:
    """The planner's largest micro-batch that fits (0: none does), found by the same search as the measurement."""
    fits = {}
    while (micro := next_micro(fits, 1, limit)) is not None:
        fits[micro] = estimate(replace(base, micro_batch=micro)).verdict == "fits"
    return max((m for m, ok in fits.items() if ok), default=0)


def parse(argv: Sequence[str]):
    parser = argparse.ArgumentParser(prog="trl-ds fit", description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for trl-ds run, your files included: "
                        "deepspeed.from_file=, launcher.from_accelerate=, trainer.from_trl_config=, script=")
    parser.add_argument("--steps", type=int, default=3, help="training steps per micro-batch (default 3)")
    parser.add_argument("--limit", type=int, default=None, help="the largest micro-batch tried (default 8 x the "
                        "planner's, at least 64)")
    parser.add_argument("--start", type=int, default=None, help="the first micro-batch (default the planner's)")
    parser.add_argument("--run-dir", default=None, help="default outputs/fit/<date>/<time>")
    parser.add_argument("--json", action="store_true", help="print fit.json instead of the lines")
    parser.add_argument("--simulate-oom-above", type=int, default=None, help=argparse.SUPPRESS)  # the CPU smoke
    return parser.parse_args(argv)


def prepare(args) -> dict:
    """Compose and check the run, write its run dir at the starting micro-batch; ConfigError for a user mistake."""
    from trl_ds.check.resolve import resolve
    from trl_ds.cli.app import build, write_run_dir
    from trl_ds.config.compose import compose
    from trl_ds.config.run_name import run_name

    run = resolve(args.overrides)  # the files users bring and auto-fit, as the run resolves them
    if run.problems:
        raise ConfigError(run.problems)
    cfg = run.cfg
    if run.topology.world != 1:
        raise ConfigError([f"trl-ds fit measures one rank, but the cluster starts {run.topology.world} "
                           f"(cluster={cfg.cluster.name}). Use cluster=1x1 (or cluster.gpus_per_node=1 "
                           f"cluster.nodes=1)."])
    trainer = value(cfg.trainer.name)
    if trainer not in SEARCHED:
        raise ConfigError([f"trl-ds fit searches trainer=sft or trainer=dpo, not trainer={trainer} (its micro-batch "
                           f"is not a free size). Measure it with a run: python -m trl_ds trainer={trainer} ..."])
    for name, n in (("--steps", args.steps), ("--limit", args.limit), ("--start", args.start)):
        if n is not None and n < 1:
            raise ConfigError([f"trl-ds fit {name}={n}: it must be at least 1."])
    base = setup_from_config(cfg)
    planned = planner_max_micro(base, 4096)
    limit = args.limit or max(8 * planned, 64)
    start = min(args.start or planned or 1, limit)
    run_dir = os.path.abspath(args.run_dir or os.path.join("outputs", "fit", run_name()))
    forced = [*args.overrides, *FORCED, f"trainer.per_device_train_batch_size={start}"]  # by name: over the files
    cfg = compose(forced)
    # launching: the rank starts on this machine, so what it must have (GPUs, data, ops) is checked before it spawns
    prepared = build(cfg, run_dir, launching=True, command_line=forced, shown=list(args.overrides))
    write_run_dir(cfg, prepared, overrides=list(args.overrides))
    env = {**cfg.cluster.env, **cfg.launcher.env}
    return {"run_dir": run_dir, "base": base, "planner_max_micro": planned, "start": start, "limit": limit,
            "env": env}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def search(job: dict, args) -> int:
    """The rank's process, started again (continuing from fit.json) when it ends on an unusable engine."""
    cmd = [sys.executable, "-m", "trl_ds.worker.fit", job["run_dir"], "--start", str(job["start"]), "--limit",
           str(job["limit"]), "--steps", str(args.steps)]
    if args.simulate_oom_above is not None:
        cmd += ["--simulate-oom-above", str(args.simulate_oom_above)]
    for _ in range(1 + RESTARTS):
        env = {**os.environ, **job["env"], "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        rc = subprocess.call(cmd, env=env, stdout=sys.stderr if args.json else None)
        if rc != ENGINE_BROKEN:
            return rc
    return ENGINE_BROKEN


def summarize(job: dict) -> dict:
    """fit.json with the planner's side added: its largest micro-batch and its estimate at the measured one."""
    path = os.path.join(job["run_dir"], FIT_FILE)
    record = read_json(path)
    best = record.get("measured_max_micro")
    record["planner_max_micro"] = job["planner_max_micro"]
    if best:
        at = estimate(replace(job["base"], micro_batch=best))
        reserved = record["at_max"].get("peak_reserved_bytes")
        record.update(estimate_at_max_bytes=at.device_total, reserved_over_estimate=round(
            reserved / at.device_total, 3) if reserved else None)
    write_json(path, record)
    return record


def lines(record: dict, run_dir: str) -> List[str]:
    out = [f"  micro-batch {t['micro_batch']:>4}: {t['status']}" + (
        f", peak reserved {t['peak_reserved_bytes'] / GiB:.2f} GiB" if "peak_reserved_bytes" in t else "")
        + (" (the largest again, measured last)" if t.get("confirm") else "") for t in record["trials"]]
    best = record.get("measured_max_micro")
    if best is None:  # killed, or the engine failed again in every fresh process
        return out + [f"trl-ds fit: the search did not finish; the trials so far are above and in "
                      f"{os.path.join(run_dir, FIT_FILE)}; the rank's output above says why."]
    bounded = f" (the --limit {record['limit']}: larger was not tried)" if record.get("bounded_by_limit") else ""
    if record.get("confirmed") is False:
        bounded += f" (but it did not train when tried again last: {record['at_max'].get('error', '')})"
    out.append(f"trl-ds fit: largest micro-batch that trained {record['steps']} steps: {best}{bounded}; the planner's "
               f"largest that fits: {record['planner_max_micro']}.")
    if record.get("reserved_over_estimate") is not None:
        out.append(f"  at {best}: peak reserved {record['at_max']['peak_reserved_bytes'] / GiB:.2f} GiB = "
                   f"{record['reserved_over_estimate']} x the estimate ({record['estimate_at_max_bytes'] / GiB:.2f} "
                   f"GiB)")
    out.append(f"  fit.json: {os.path.join(run_dir, FIT_FILE)}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        job = prepare(args)
    except ConfigError as err:
        print(f"trl-ds fit: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    rc = search(job, args)
    if not os.path.exists(os.path.join(job["run_dir"], FIT_FILE)):
        if rc != EXIT_USER_ERROR:  # a refusal's one line (cluster.gpu_memory_gb, an op lock) is the rank's last
            print(f"trl-ds fit: the rank ended (exit code {rc}) before its first trial; its output is above",
                  file=sys.stderr)
        return rc or 1
    record = summarize(job)
    if args.json:
        import json

        print(json.dumps(record, indent=2))
    else:
        print("\n".join(lines(record, job["run_dir"])))
    return rc


if __name__ == "__main__":
    sys.exit(main())
