"""Launchers: pure builders of commands and scripts, plus `start`, the only function here that spawns.

The app calls three things, whatever the launcher: `build_commands` (every node's command, as argument lists),
`write_launch_files` (launch.sh and launcher-specific files into the run dir) and `start` (run this node's share).
"""
import os
from typing import Dict, List

from ..rundir import write_text
from .script import render_launch_script
from .torchrun import build_node_commands


def build_commands(cfg, run_dir: str) -> List[List[str]]:
    return build_node_commands(cfg, run_dir)


def write_launch_files(cfg, run_dir: str, node_commands: List[List[str]]) -> None:
    write_text(os.path.join(run_dir, "launch.sh"),
               render_launch_script(node_commands, run_dir, launch_env(cfg)), mode=0o755)


def launch_env(cfg) -> Dict[str, str]:
    return dict(cfg.launcher.env)


def start(cfg, node_commands: List[List[str]]) -> int:
    from .run import run_node

    return run_node(node_commands[cfg.cluster.node_rank], launch_env(cfg))
