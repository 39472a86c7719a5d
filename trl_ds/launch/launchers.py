"""The launchers trl_ds drives, each in one entry: how every node's command is built, which files it needs beside
launch.sh, and how a launch starts (this node's share, or a submitted job). The checks of each launcher's settings
are its module's (deepspeed.check_deepspeed_launcher, slurm.check_slurm), run whatever the launcher: another
launcher's settings given to this one are a mistake too.

The rest of trl_ds asks a launcher what it does (`launcher_of(cfg).submits`, `.env_file`) instead of comparing
launcher.name with a string, so a launcher is described here once.
"""
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from trl_ds.config.values import value
from trl_ds.errors import ConfigError
from trl_ds.rundir.layout import DEEPSPEED_ENV, HOSTFILE, SBATCH_SCRIPT

from .deepspeed import build_deepspeed_commands, env_file_values, load_hosts, render_env_file
from .hostfile import render_hostfile
from .slurm import render_sbatch, submit_job
from .torchrun import build_node_commands


@dataclass(frozen=True)
class Launcher:
    name: str
    build_commands: Callable[..., List[List[str]]]  # (cfg, run_dir): every node's command; each ends in the run dir
    files: Callable[..., Dict[str, str]]  # (cfg, run_dir): file name in the run dir -> text, beside launch.sh
    submit: Optional[Callable[..., int]] = None  # (cfg, run_dir, env): a job that starts every node, instead of this
    env_file: Optional[str] = None  # the environment file its remote starts read, written beside launch.sh

    @property
    def submits(self) -> bool:
        """No rank runs under this process: the job scheduler starts them, and the job writes the summary."""
        return self.submit is not None


def launch_env(cfg) -> Dict[str, str]:
    """cluster.env (network) then launcher.env (anything else); the launcher's entry wins on a clash."""
    return {**cfg.cluster.env, **cfg.launcher.env}


def deepspeed_files(cfg, run_dir: str) -> Dict[str, str]:
    hosts, origin, _ = load_hosts(cfg)
    return {HOSTFILE: render_hostfile(hosts, origin),
            DEEPSPEED_ENV: render_env_file(env_file_values(cfg, launch_env(cfg)))}


def slurm_commands(cfg, run_dir: str) -> List[List[str]]:
    if "\n" in run_dir or "\r" in run_dir:
        raise ConfigError([f"the run dir {run_dir!r} holds a line break, which sbatch.sh's #SBATCH --output line "
                           f"cannot carry. Choose another with hydra.run.dir=..."])
    return build_node_commands(cfg, run_dir)  # what srun runs on each node


def submit_sbatch(cfg, run_dir: str, env: Dict[str, str]) -> int:
    if not cfg.launcher.slurm.submit:
        print(f"trl_ds: wrote {run_dir}/{SBATCH_SCRIPT} (launcher.slurm.submit=false); submit it with: "
              f"sbatch {run_dir}/{SBATCH_SCRIPT}")
        return 0
    return submit_job(run_dir, env)


LAUNCHERS = {launcher.name: launcher for launcher in (
    Launcher("torchrun", build_node_commands, files=lambda cfg, run_dir: {}),
    Launcher("deepspeed", build_deepspeed_commands, files=deepspeed_files, env_file=DEEPSPEED_ENV),
    Launcher("slurm", slurm_commands, files=lambda cfg, run_dir: {SBATCH_SCRIPT: render_sbatch(cfg, run_dir)},
             submit=submit_sbatch),
)}


def launcher_of(cfg) -> Launcher:
    return LAUNCHERS[value(cfg.launcher.name)]
