"""Every `trl-ds` command, in the order `trl-ds --help` lists them (TRL's trl/cli/commands pattern).

A command has `register(subparsers)`, which adds its argparse parser, and `run(args)`, which returns the exit code.
Only the command that runs is registered, and what it needs is imported inside, so `trl-ds --help` is instant and
`trl-ds plan` never imports torch. Commands that read Hydra overrides or keep their parser in their own cli module
are `Forwarded`: everything after the name goes to that module's `main(argv)`. The libraries behind the others take
plain values and never read argv.
"""
import argparse
import importlib
import os
import sys
import tempfile
from typing import List


class Command:
    def __init__(self, name: str, summary: str):
        self.name, self.summary = name, summary

    def register(self, subparsers) -> argparse.ArgumentParser:
        return subparsers.add_parser(self.name, help=self.summary, description=self.summary)

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


class Forwarded(Command):
    """`args.argv` (every argument after the command's name, in order) goes to `main(argv)` of `module`."""

    def __init__(self, name: str, module: str, summary: str, short_lived: bool = False):
        super().__init__(name, summary)
        self.module, self.short_lived = module, short_lived

    def register(self, subparsers) -> argparse.ArgumentParser:
        return subparsers.add_parser(self.name, help=self.summary, add_help=False)  # its module answers --help

    def run(self, args: argparse.Namespace) -> int:
        if self.short_lived:  # a command that ends in seconds: no garbage collection it does not need
            from trl_ds.short_lived import pause_collection

            pause_collection()
        return importlib.import_module(self.module).main(args.argv) or 0


class Report(Command):
    def register(self, subparsers):
        parser = subparsers.add_parser(self.name, help=self.summary, description=self.summary,
                                       epilog="See trl_ds/study/report.py or docs/memory-studies.md.")
        parser.add_argument("paths", nargs="+", metavar="PATH", help="sweep folders and/or run dirs")
        parser.add_argument("--out", metavar="DIR", help="where to write every file of the report (default: the "
                            "first sweep folder, or the one run dir)")
        return parser

    def run(self, args):
        from trl_ds.study.report import report

        return report(args.paths, args.out)


class Env(Command):
    def register(self, subparsers):
        from trl_ds.launch.env import DEFAULT_NVME_PATH

        parser = super().register(subparsers)
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")
        parser.add_argument("--nvme-path", default=DEFAULT_NVME_PATH, help="where offload.nvme_path would point")
        return parser

    def run(self, args):
        from trl_ds.launch.env import print_env

        return print_env(args.nvme_path, as_json=args.json)


class Calibrate(Command):
    def register(self, subparsers):
        parser = super().register(subparsers)
        parser.add_argument("--out", default="hardware.yaml", help="the hardware YAML to write")
        parser.add_argument("--ranks", type=int, default=2, help="ranks per node that will share this machine")
        parser.add_argument("--nvme-path", default=tempfile.gettempdir(), help="folder on the NVMe drive to test")
        parser.add_argument("--deepspeed-adam", action="store_true", help="time DeepSpeedCPUAdam (slow to load)")
        return parser

    def run(self, args):
        from trl_ds.study.calibrate import calibrate

        return calibrate(args.out, args.ranks, args.nvme_path, args.deepspeed_adam)


class CheckEquivalence(Command):
    def register(self, subparsers):
        parser = subparsers.add_parser(self.name, help=self.summary, description=self.summary,
                                       epilog="See trl_ds/study/equivalence.py for the points and the tolerances.")
        parser.add_argument("--global-batch", type=int, default=8, help="samples per optimizer step (divisible by 4)")
        parser.add_argument("--steps", type=int, default=4)
        parser.add_argument("--ranks", default="1,2,4",
                            help="rank counts to try, e.g. 1,2 (4 ranks on 2 cores is slow)")
        parser.add_argument("--points", default="",
                            help="only these points, e.g. 1x8x1,2x4x1 (the first is the reference)")
        parser.add_argument("--zero", action="store_true", help="compare ZeRO stages instead of batch shapes")
        parser.add_argument("--out", default=None, help="default outputs/equivalence/<date>_<time>")
        parser.add_argument("overrides", nargs="*", help="Hydra overrides of the main app, applied to every point")
        return parser

    def run(self, args):
        from trl_ds.config.run_name import run_name
        from trl_ds.study.equivalence import check_equivalence

        if args.global_batch % 4:
            print(f"trl-ds check-equivalence: --global-batch {args.global_batch} must be divisible by 4 (it is split "
                  f"into micro-batches of a quarter). Use --global-batch "
                  f"{args.global_batch + 4 - args.global_batch % 4}.", file=sys.stderr)
            return 2
        out = args.out or os.path.join("outputs", "equivalence", run_name().replace("/", "_"))
        return check_equivalence(args.global_batch, args.steps, [int(r) for r in args.ranks.split(",")],
                                 [p for p in args.points.split(",") if p], args.zero, out, args.overrides)


class BuildOps(Command):
    def register(self, subparsers):
        from trl_ds.launch.build_ops import BUILDERS

        self.parser = super().register(subparsers)
        self.parser.add_argument("ops", nargs="*", metavar="OP",
                                 help=f"ops to build (default: all of {', '.join(BUILDERS)})")
        return self.parser

    def run(self, args):
        from trl_ds.launch.build_ops import BUILDERS, build_ops

        unknown = [name for name in args.ops if name not in BUILDERS]
        if unknown:
            self.parser.error(f"unknown op {', '.join(unknown)}; choose from {', '.join(BUILDERS)}")  # exits 2
        return build_ops(args.ops or list(BUILDERS))


COMMANDS: List[Command] = [
    Forwarded("run", "trl_ds.cli.run", "compose, check, write the run dir and launch (Hydra overrides; -m sweeps)"),
    Forwarded("plan", "trl_ds.cli.plan", "which ZeRO / offload / micro-batch / checkpointing configs fit, how fast",
              short_lived=True),
    Forwarded("fit", "trl_ds.cli.fit", "on a GPU node: the largest micro-batch that really trains, beside the plan's"),
    Forwarded("watch", "trl_ds.cli.watch", "follow a run dir (running or finished) to its end; exit with its status"),
    Report("report", "a sweep's table and plot: estimated beside measured memory"),
    Forwarded("export", "trl_ds.cli.export", "ds_config.json, trainer.yaml and accelerate.yaml of a run, without it"),
    Forwarded("doctor", "trl_ds.cli.doctor",
              "check the hosts and their network before a launch (same overrides as run)"),
    Env("env", "this machine as trl_ds sees it: versions, devices, memory, libaio, SLURM"),
    Calibrate("calibrate", "measure this machine's step-time numbers into a hardware file"),
    CheckEquivalence("check-equivalence", "do batch shapes and ZeRO stages train the same model?"),
    BuildOps("build-ops", "JIT-build the DeepSpeed ops that offloaded runs need, once"),
]
BY_NAME = {c.name: c for c in COMMANDS}
