"""`trl-ds plan`: the planner's table (trl_ds/plan/planner.py); with --need, the hardware that can train the run
(trl_ds/plan/need.py); with --plot FILE, the table's memory as a picture (trl_ds/study/plan_plot.py).

    trl-ds plan model=llama3-8b cluster=1x8 batch.global_size=64
    trl-ds plan --need model=llama3-70b batch.global_size=64 trainer.max_steps=2000
    trl-ds plan --need --gpus a100-80gb,h100-80gb --counts 8,16 --tokens 2e9 model=llama3-8b batch.global_size=64
    trl-ds plan --plot plan.png model=llama3-8b cluster=1x8 cluster.gpu_memory_gb=24
"""
import json
import sys
from typing import List, Optional, Sequence, Tuple

from trl_ds.errors import EXIT_USER_ERROR, ConfigError
from trl_ds.plan import need as need_mod
from trl_ds.plan import planner
from trl_ds.plan.params import describe_count
from trl_ds.plan.runtime import split_tokens
from trl_ds.short_lived import pause_collection


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


EXAMPLES = {"--gpus": "a100-80gb,h100-80gb", "--counts": "1,8,16,32", "--plot": "plan.png"}


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


def need_main(args: List[str]) -> int:
    args = [a for a in args if a != "--need"]
    args, gpus = take(args, "--gpus")
    args, counts = take(args, "--counts")
    args, tokens = split_tokens(args)
    overrides = [a for a in args if a != "--json"]
    fitting, misfits = need_mod.need(overrides, gpus.split(",") if gpus else need_mod.presets(), counts_of(counts),
                                     tokens)
    if "--json" in args:
        print(json.dumps(need_mod.as_json(fitting, misfits), indent=2))
    else:
        basis = f"{describe_count(int(tokens))} training tokens" if tokens else "the configured steps or epochs"
        print(need_mod.render(fitting, misfits, f"whole run for {basis}"))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:
        pause_collection()
    if "-h" in args or "--help" in args:
        print(__doc__.strip() + "\n\n" + planner.__doc__.strip())
        return 0
    try:
        if "--need" in args:
            return need_main(args)
        args, plot = take(args, "--plot")
    except ConfigError as err:
        print(f"trl-ds plan: {err.render()}", file=sys.stderr)
        return EXIT_USER_ERROR
    if plot is not None:
        from trl_ds.study.plan_plot import plot_main
        return plot_main(args, plot)
    return planner.main(args)


if __name__ == "__main__":
    sys.exit(main())
