"""`trl-ds COMMAND [ARGS ...]`: the one command; the commands are the registry of trl_ds/cli/commands.py.

    trl-ds run zero=stage3 cluster=1x8           # = python -m trl_ds zero=stage3 cluster=1x8
    trl-ds plan model=llama3-70b cluster=1x8     # every command takes the same Hydra overrides as run
"""
import argparse
import difflib
import sys
from typing import Optional, Sequence

from trl_ds.cli.commands import BY_NAME, COMMANDS, Forwarded
from trl_ds.errors import EXIT_USER_ERROR


def usage() -> str:
    width = max(len(c.name) for c in COMMANDS) + 2
    lines = ["usage: trl-ds COMMAND [ARGS ...]", "",
             "Hydra-composed, checked DeepSpeed + TRL runs: one resolved config, the exact launch commands, real "
             "training.", "", "commands:"]
    lines += [f"  {c.name:<{width}}{c.summary}" for c in COMMANDS]
    lines += ["", "`trl-ds COMMAND --help` shows a command's options; `python -m trl_ds ARGS` is `trl-ds run ARGS`.",
              "Bring your own (run, plan, export, fit, doctor): script=, deepspeed.from_file=, "
              "launcher.from_accelerate=, trainer.from_trl_config= (docs/interop.md)."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_USER_ERROR
    command = BY_NAME.get(args[0])
    if command is None:
        close = difflib.get_close_matches(args[0], BY_NAME, n=1)
        hint = f" Did you mean `trl-ds {close[0]}`?" if close else ""
        print(f"trl-ds: unknown command '{args[0]}'.{hint} Commands: {', '.join(BY_NAME)}.", file=sys.stderr)
        return EXIT_USER_ERROR
    # Only the command that runs is registered: another's parser may import what this one never needs.
    parser = argparse.ArgumentParser(prog="trl-ds", add_help=False, allow_abbrev=False)
    own = command.register(parser.add_subparsers(dest="command"))
    parsed, unknown = parser.parse_known_args(args)
    if isinstance(command, Forwarded):  # Hydra overrides and the module's own flags, in the order given
        parsed.argv = unknown
    elif unknown:
        own.error(f"unrecognized arguments: {' '.join(unknown)}")  # exits 2, with the command's own usage
    return command.run(parsed) or 0
