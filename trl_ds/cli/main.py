"""`trl-ds COMMAND [ARGS ...]`: the one command. Each subcommand is a module whose `main()` reads its own arguments.

    trl-ds run zero=stage3 cluster=1x8           # = python -m trl_ds zero=stage3 cluster=1x8
    trl-ds plan model=llama3-70b cluster=1x8     # every command takes the same Hydra overrides as run
    trl-ds report multirun/2026-12-02/10-00-00
    trl-ds plan --help                           # each command's own options

Adding a command is one line in COMMANDS: its name, the module whose `main()` it runs, one line of help. The module
is imported only when its command runs, so `trl-ds plan` never imports torch and `trl-ds --help` is instant.
"""
import difflib
import importlib
import sys
from typing import NamedTuple, Optional, Sequence

from trl_ds.errors import EXIT_USER_ERROR


class Command(NamedTuple):
    name: str
    module: str  # its main() parses sys.argv[1:], exactly as `python -m <module>` would run it
    summary: str


COMMANDS = (
    Command("run", "trl_ds.cli.run", "compose, check, write the run dir and launch (Hydra overrides; -m sweeps)"),
    Command("plan", "trl_ds.cli.plan", "which ZeRO / offload / micro-batch / checkpointing configs fit, how fast"),
    Command("fit", "trl_ds.cli.fit", "on a GPU node: the largest micro-batch that really trains, beside the plan's"),
    Command("watch", "trl_ds.cli.watch", "follow a run dir (running or finished) to its end; exit with its status"),
    Command("report", "trl_ds.study.report", "a sweep's table and plot: estimated beside measured memory"),
    Command("export", "trl_ds.cli.export", "ds_config.json, trainer.yaml and accelerate.yaml of a run, without it"),
    Command("doctor", "trl_ds.cli.doctor", "check the hosts and their network before a launch (same overrides as run)"),
    Command("env", "trl_ds.launch.env", "this machine as trl_ds sees it: versions, devices, memory, libaio, SLURM"),
    Command("calibrate", "trl_ds.study.calibrate", "measure this machine's step-time numbers into a hardware file"),
    Command("check-equivalence", "trl_ds.study.equivalence", "do batch shapes and ZeRO stages train the same model?"),
    Command("build-ops", "trl_ds.launch.build_ops", "JIT-build the DeepSpeed ops that offloaded runs need, once"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def usage() -> str:
    width = max(len(c.name) for c in COMMANDS) + 2
    lines = ["usage: trl-ds COMMAND [ARGS ...]", "",
             "Hydra-composed, checked DeepSpeed + TRL runs: one resolved config, the exact launch commands, real "
             "training.", "", "commands:"]
    lines += [f"  {c.name:<{width}}{c.summary}" for c in COMMANDS]
    lines += ["", "`trl-ds COMMAND --help` shows a command's options; `python -m trl_ds ARGS` is `trl-ds run ARGS`."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_USER_ERROR
    name, rest = args[0], args[1:]
    command = BY_NAME.get(name)
    if command is None:
        close = difflib.get_close_matches(name, BY_NAME, n=1)
        hint = f" Did you mean `trl-ds {close[0]}`?" if close else ""
        print(f"trl-ds: unknown command '{name}'.{hint} Commands: {', '.join(BY_NAME)}.", file=sys.stderr)
        return EXIT_USER_ERROR
    sys.argv = [f"trl-ds {name}", *rest]  # Hydra and argparse read the program name and arguments from here
    return importlib.import_module(command.module).main() or 0
