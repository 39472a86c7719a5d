"""`trl-ds plan [--json] [--fits] [overrides]`: which ZeRO/offload/checkpointing/micro-batch configs fit.

    trl-ds plan model=llama3-70b cluster=1x8 trainer.max_length=2048
    trl-ds plan model=llama3-8b cluster=1x8 cluster.gpu_memory_gb=24 --fits   # only the rows that fit
    trl-ds plan model=llama3-8b cluster=2x8 --json                            # everything, as JSON
    trl-ds plan model.name_or_path=Qwen/Qwen2.5-7B cluster=1x1 cluster.gpu_memory_gb=24   # cached config
    trl-ds plan model.name_or_path=/models/my-moe cluster=2x8        # a save_pretrained folder

Any override of the main app applies; the grid then varies ZeRO stage × offload × gradient checkpointing ×
micro-batch around it. The config goes through the launch's own check first (a config the launch refuses is refused
here, with the same lines and exit code 2), and so does every row: the table, the recommendation and its run: line
hold only configs the launch accepts. The model's config.json (or the preset) gives the architecture. No DeepSpeed
(unless deepspeed.* keys ask for its verdict), no weights, and no torch unless the family is counted on the meta
device: the numbers come from trl_ds/plan/memory.py, the estimated seconds per optimizer step (the rows' order, fitting
rows first) from trl_ds/plan/steptime.py with the cluster.gpu hardware preset (or a `trl-ds calibrate` file).
"""
import sys
from typing import List, Optional, Sequence, Tuple

from trl_ds.check.plan_rows import RowCheck, config_problems
from trl_ds.config.model_source import display_name
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.plan.memory import Estimate, Setup, estimate
from trl_ds.plan.planner import Times, as_json, by_time, grid, load, render, times_for
from trl_ds.short_lived import pause_collection

FLAGS = ("--json", "--fits")  # JSON instead of the table; only the rows that fit


def plan(overrides: Sequence[str]):
    """(config, rows the launch accepts, the current config's estimate, step times); ConfigError where the launch
    would refuse the config itself."""
    cfg, base = load(overrides)
    return (cfg, *plan_config(cfg, base))


def plan_config(cfg, base: Setup) -> Tuple[List[Estimate], Estimate, Times]:
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems)
    rows, current = grid(base, cfg.batch.global_size, RowCheck(cfg)), estimate(base)
    return rows, current, times_for(cfg, rows + [current])


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the command line, not a caller in a longer-lived process
        pause_collection()
    if "-h" in args or "--help" in args:
        print(__doc__.strip())
        return 0
    overrides = [a for a in args if a not in FLAGS]
    try:
        cfg, rows, current, times = plan(overrides)
    except ConfigError as err:
        print(f"trl-ds plan: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    rows = by_time(rows, times)
    names = (cfg.cluster.name, display_name(cfg.model))
    if "--json" in args:
        import json
        print(json.dumps(as_json(rows, current, names, overrides, times), indent=2))
    else:
        print(render(rows, current, names, overrides, times, only_fitting="--fits" in args, model_cfg=cfg.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
