"""`trl-ds plan [--json] [--fits] [--tokens N] [--plot FILE] [--need [--gpus A,B] [--counts 1,8]] [overrides]`:
which ZeRO/offload/checkpointing/micro-batch configs fit
(trl_ds/plan/planner.py), and the whole run's time; with --need, the hardware that can train the run
(trl_ds/plan/need.py); with --plot FILE, the table's memory as a picture (trl_ds/study/plan_plot.py).

    trl-ds plan model=llama3-70b cluster=1x8 trainer.max_length=2048
    trl-ds plan model=llama3-8b cluster=1x8 cluster.gpu_memory_gb=24 --fits   # only the rows that fit
    trl-ds plan model=llama3-8b cluster=2x8 --json                            # everything, as JSON
    trl-ds plan model.name_or_path=Qwen/Qwen2.5-7B cluster=1x1 cluster.gpu_memory_gb=24   # cached config
    trl-ds plan model.name_or_path=/models/my-moe cluster=2x8        # a save_pretrained folder
    trl-ds plan model=llama3-8b cluster=1x8 --tokens 2e9     # the whole run's time and GPU-hours for 2e9 tokens
    trl-ds plan --need model=llama3-70b batch.global_size=64 trainer.max_steps=2000
    trl-ds plan --need --gpus a100-80gb,h100-80gb --counts 8,16 --tokens 2e9 model=llama3-8b batch.global_size=64
    trl-ds plan --plot plan.png model=llama3-8b cluster=1x8 cluster.gpu_memory_gb=24
    trl-ds plan deepspeed.from_file=ds_z3.json model=llama3-8b cluster=1x8      # your DeepSpeed JSON, as run takes it

Flags, in any order, each checked before any work: --json, --fits, --tokens N, --plot FILE (a folder: FILE/plan.png;
.png, .svg, .pdf, ...), --need with --gpus A,B and --counts 1,8,16,32. The files users bring are overrides here as on
`trl-ds run`: deepspeed.from_file=, launcher.from_accelerate=, trainer.from_trl_config=, script= (docs/interop.md);
each key of those files and where it went is printed first, as the dry run prints them (--json: on stderr).
Any override of the main app applies; the grid then varies ZeRO stage × offload × gradient checkpointing ×
micro-batch around it, and with tp=auto / sp=auto / offload=auto the tp size, the sp size and the partial offload
ratios too (each a column of the table where the rows differ in it). The config goes through the launch's own
check first (a config the launch refuses is refused here, with the same lines and exit code 2), and so does every
row: the table, the recommendation and its run: line hold only configs the launch accepts
(trl_ds/check/plan_rows.py), and so do --need's and --plot's.
"""
import json
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from trl_ds.check.imported import sources
from trl_ds.check.plan_rows import RowCheck, config_problems
from trl_ds.check.resolve import Run, resolve
from trl_ds.config.model_source import display_name
from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.plan import need as need_mod
from trl_ds.plan.dimensions import bases
from trl_ds.plan.memory import Estimate, Setup, estimate, setup_from_config
from trl_ds.plan.params import describe_count
from trl_ds.plan.planner import Times, as_json, by_time, grid, recommend, render, times_for
from trl_ds.plan.runtime import render_runs, runs_json, split_tokens, whole_runs
from trl_ds.short_lived import pause_collection

SWITCHES = ("--json", "--fits", "--need")  # JSON instead of the table; only what fits; the hardware question
VALUED = ("--gpus", "--counts", "--plot")  # and --tokens N (plan/runtime.py split_tokens)
NEED_ONLY = ("--gpus", "--counts")
EXAMPLES = {"--gpus": "a100-80gb,h100-80gb", "--counts": "1,8,16,32", "--plot": "plan.png"}


@dataclass
class Flags:
    switches: frozenset
    values: Dict[str, Optional[str]]
    tokens: Optional[float]
    plot: Optional[str] = None  # the file --plot writes: a folder's plan.png, a name without suffix's .png

    def has(self, flag: str) -> bool:
        return flag in self.switches


def parse(args: Sequence[str]) -> Tuple[Flags, List[str]]:
    """Every flag, in any order, checked before any work; the rest are overrides. ConfigError for each mistake."""
    rest, tokens = split_tokens(list(args))
    values = {}
    for flag in VALUED:
        rest, values[flag] = take(rest, flag)
    flags = Flags(frozenset(a for a in rest if a in SWITCHES), values, tokens)
    overrides = [a for a in rest if a not in SWITCHES]
    unknown = [a for a in overrides if a.startswith("-")]
    if unknown:
        raise ConfigError([f"{unknown[0]}: not a flag of trl-ds plan (its flags: {', '.join(SWITCHES + VALUED)}, "
                           f"--tokens; see trl-ds plan --help)."])
    stray = [f for f in NEED_ONLY if values[f] is not None and not flags.has("--need")]
    if stray:
        raise ConfigError([f"{stray[0]} {values[stray[0]]}: {stray[0]} chooses --need's shapes; add --need, or drop "
                           f"{stray[0]}."])
    if values["--plot"] is not None:
        from trl_ds.study.plan_plot import plot_target, require_matplotlib
        require_matplotlib()
        flags.plot = plot_target(values["--plot"])
    return flags, overrides


def plan(overrides: Sequence[str]):
    """(config, rows the launch accepts, the current config's estimate, step times); ConfigError where the launch
    would refuse the config itself."""
    run, rows, current, times = plan_run(overrides)
    return run.cfg, rows, current, times


def plan_run(overrides: Sequence[str]) -> Tuple[Run, List[Estimate], Estimate, Times]:
    """plan(), with the whole resolved run: its files' mapping lines are printed as the dry run prints them."""
    run = resolve(overrides, fit="keep")  # the run `python -m trl_ds OVERRIDES` launches: files, auto-fit
    if run.problems:
        raise ConfigError(run.problems)
    return (run, *plan_config(run.cfg, setup_from_config(run.cfg), run.open_cfg))


def print_files(run: Run, flags: Flags) -> None:
    """Each key of the user's files and where it went, before the table, as `python -m trl_ds ... dry_run=true`
    prints them; with --json on stderr, so stdout stays one JSON document."""
    if run.text:
        print(run.text, file=sys.stderr if flags.has("--json") else sys.stdout)


def plan_config(cfg, base: Setup, open_cfg=None) -> Tuple[List[Estimate], Estimate, Times]:
    """The rows around the resolved config; open_cfg: the config before auto-fit chose, whose `auto` choices (tp, sp,
    partial offload ratios) the rows still vary, while the current row is the choice the run launches."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems)
    varied = cfg if open_cfg is None else open_cfg
    accepts, ratios = RowCheck(cfg), bool(varied.offload.get("auto", False))
    rows = [e for b in bases(varied) for e in grid(b, cfg.batch.global_size, accepts, ratios)]  # tp/sp=auto: each
    current = estimate(base)
    return rows, current, times_for(cfg, rows + [current])


def take(args: List[str], flag: str) -> Tuple[List[str], Optional[str]]:
    """The arguments without `flag VALUE` (or `flag=VALUE`), and VALUE (None when absent)."""
    for i, arg in enumerate(args):
        if arg == flag or arg.startswith(flag + "="):
            if "=" in arg:
                return args[:i] + args[i + 1:], arg.split("=", 1)[1]
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ConfigError([f"{flag} needs a value, e.g. {flag} {EXAMPLES[flag]}."])
            return args[:i] + args[i + 2:], args[i + 1]
    return args, None


def counts_of(text: Optional[str]) -> Sequence[int]:
    if text is None:
        return need_mod.COUNTS
    try:
        counts = [int(c) for c in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or any(c > need_mod.PER_NODE and c % need_mod.PER_NODE for c in counts):
        raise ConfigError([f"--counts {text}: give GPU counts, 1 to {need_mod.PER_NODE} or whole nodes of "
                           f"{need_mod.PER_NODE}, e.g. --counts 1,8,16,32."])
    return counts


def resolved(overrides: Sequence[str]):
    """A --need shape's config, as the run resolves it (the files users bring imported; auto left to the fit)."""
    run = resolve(overrides, fit="off")
    if run.problems:
        raise ConfigError(run.problems)
    return run.cfg


def need_main(flags: Flags, overrides: List[str]) -> int:
    gpus, counts = flags.values["--gpus"], flags.values["--counts"]
    files = resolve(overrides, fit="off")  # the keys the user's files set stay as they set them
    print_files(files, flags)
    answer = need_mod.need(overrides, gpus.split(",") if gpus else need_mod.presets(), counts_of(counts),
                           flags.tokens, row_check=RowCheck, load=resolved, from_files=list(sources(files.lines)))
    if flags.has("--json"):
        print(json.dumps(need_mod.as_json(answer), indent=2))
    else:
        tokens = flags.tokens
        basis = f"{describe_count(int(tokens))} training tokens" if tokens else "the configured steps or epochs"
        print(need_mod.render(answer, f"whole run for {basis}", only_fitting=flags.has("--fits")))
    if flags.plot is not None:
        from trl_ds.study.plan_plot import plot_need
        plot_need(answer.fitting, flags.plot, to=sys.stderr if flags.has("--json") else sys.stdout)
    return 0


def table_main(flags: Flags, overrides: List[str]) -> int:
    """The table (or JSON) and the whole run's time; with --plot, the picture of the rows shown too."""
    run, rows, current, times = plan_run(overrides)
    cfg, rows = run.cfg, by_time(rows, times)
    print_files(run, flags)
    names = (cfg.cluster.name, display_name(cfg.model))
    best = recommend(rows, times)
    runs = whole_runs(cfg, [("current", current), ("recommended", best)], times, flags.tokens)
    if flags.has("--json"):
        print(json.dumps({**as_json(rows, current, names, overrides, times), "whole_run": runs_json(runs)}, indent=2))
    else:
        print(render(rows, current, names, overrides, times, only_fitting=flags.has("--fits"), model_cfg=cfg.model))
        print(render_runs(runs))
    if flags.plot is not None:
        from trl_ds.study.plan_plot import plot_rows
        plot_rows(cfg, rows, best, flags.plot, only_fitting=flags.has("--fits"),
                  to=sys.stderr if flags.has("--json") else sys.stdout)  # --json: stdout stays one JSON document
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the command line, not a caller in a longer-lived process
        pause_collection()
    if "-h" in args or "--help" in args:
        print(__doc__.strip())
        return 0
    try:
        flags, overrides = parse(args)
        return (need_main if flags.has("--need") else table_main)(flags, overrides)
    except ConfigError as err:
        print(f"trl-ds plan: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
