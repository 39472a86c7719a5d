"""The launchers trl_ds drives, each in one entry: how every node's command is built, which files it needs beside
launch.sh, how a launch starts (this node's share, or a submitted job), how its nodes are reached, and its checks:
its own settings' when it is chosen, and, when another is chosen, that its settings were not given to that one.
The rest of trl_ds asks a launcher what it does (`launcher_of(cfg).submits`, `uses_ssh(cfg)`, `launcher_checks`)
instead of comparing launcher.name with a string."""
import os
import socket
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from trl_ds.config.values import value
from trl_ds.errors import ConfigError
from trl_ds.rundir.layout import DEEPSPEED_ENV, HOSTFILE, SBATCH_SCRIPT

from .deepspeed import (
    build_deepspeed_commands,
    check_deepspeed_launcher,
    check_hostfile_unused,
    env_file_values,
    load_hosts,
    render_env_file,
    selected_hosts,
)
from .deepspeed import uses_ssh as deepspeed_uses_ssh
from .gpu_count import partition_gpu_problems
from .hostfile import render_hostfile
from .slurm import check_container_unused, check_slurm_launcher, render_sbatch, submit_job
from .torchrun import build_node_commands

Checks = Tuple[Callable[..., List[str]], ...]  # each (cfg) -> problems, one line each
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Launcher:
    name: str
    build_commands: Callable[..., List[List[str]]]  # (cfg, run_dir): every node's command; each ends in the run dir
    files: Callable[..., Dict[str, str]]  # (cfg, run_dir): file name in the run dir -> text, beside launch.sh
    submit: Optional[Callable[..., int]] = None  # (cfg, run_dir, env): a job that starts every node, instead of this
    env_file: Optional[str] = None  # the environment file its remote starts read, written beside launch.sh
    over_ssh: Callable[..., bool] = lambda cfg: False  # (cfg): node 0 starts every node over ssh
    hosts: Optional[Callable[..., list]] = None  # (cfg): the hosts it starts ranks on (a hostfile), when it names them
    port_on_one_node: bool = False  # one node still serves cluster.master_port (torchrun --standalone picks its own)
    c10d: bool = True  # it can run torchrun's c10d rendezvous (launcher.rdzv_backend=c10d)
    checks: Checks = ()  # its settings' checks, when it is the chosen launcher
    unused_checks: Checks = ()  # its settings given to another launcher, when it is not chosen
    partition_gpus: Callable[..., List[str]] = lambda cfg: []  # (cfg): the job scheduler's GPUs against the cluster
    submit_hint: Optional[Callable[..., str]] = None  # (run_dir): the dry run's line saying how its job is submitted

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
    Launcher("deepspeed", build_deepspeed_commands, files=deepspeed_files, env_file=DEEPSPEED_ENV,
             over_ssh=deepspeed_uses_ssh, hosts=lambda cfg: load_hosts(cfg)[0], port_on_one_node=True, c10d=False,
             checks=(check_deepspeed_launcher,), unused_checks=(check_hostfile_unused,)),
    Launcher("slurm", slurm_commands, files=lambda cfg, run_dir: {SBATCH_SCRIPT: render_sbatch(cfg, run_dir)},
             submit=submit_sbatch, checks=(check_slurm_launcher,), unused_checks=(check_container_unused,),
             partition_gpus=partition_gpu_problems,
             submit_hint=lambda run_dir: f"sbatch {os.path.join(run_dir, SBATCH_SCRIPT)}   "
                                         f"(srun runs launch.sh on every node)"),
)}


def launcher_of(cfg) -> Launcher:
    return LAUNCHERS[value(cfg.launcher.name)]


def launcher_checks(cfg) -> List[str]:
    """The chosen launcher's checks, then every other launcher's settings that were given to it."""
    chosen = launcher_of(cfg)
    others = [check for launcher in LAUNCHERS.values() if launcher is not chosen for check in launcher.unused_checks]
    return [problem for check in (*chosen.checks, *others) for problem in check(cfg)]


def uses_ssh(cfg) -> bool:
    """Node 0's runner starts the nodes over ssh (the deepspeed launcher, several nodes, no launcher.no_ssh)."""
    return launcher_of(cfg).over_ssh(cfg)


def ssh_hosts(cfg) -> List[str]:
    """The hosts node 0's runner starts over ssh, in node-rank order (the hostfile's, after include/exclude)."""
    return selected_hosts(cfg) if uses_ssh(cfg) else []


def pdsh_hosts(cfg) -> List[str]:
    """The hosts whose per-node launchers node 0 watches and stops (pdsh); MPI runners and srun do that themselves."""
    return ssh_hosts(cfg) if value(cfg.launcher.multinode_runner) == "pdsh" else []


def ranks_run_here(cfg) -> bool:
    """Every rank starts on the machine that runs `python -m trl_ds`: one node, not submitted, not reached over ssh."""
    launcher = launcher_of(cfg)
    if launcher.submits or cfg.cluster.nodes > 1:
        return False  # submitted, or one node's share: that node's launch.sh counts its GPUs
    if launcher.hosts:
        return all(h.name in LOCAL_HOSTS + (socket.gethostname(), socket.getfqdn()) for h in launcher.hosts(cfg))
    return True


def launch_script_checks_gpus(cfg) -> bool:
    """launch.sh counts the GPUs of the node it runs on when that node starts ranks itself (not the deepspeed
    runner's ssh launch, whose node 0 may be a head node without GPUs)."""
    return value(cfg.cluster.device) == "cuda" and not uses_ssh(cfg)
