"""The one place that spawns: run this node's command, then report how the ranks ended."""
import glob
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional


def resolve_executable(cmd: List[str]) -> List[str]:
    """Prefer the launcher installed next to this Python (the venv), then PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), cmd[0])
    exe = beside if os.access(beside, os.X_OK) else shutil.which(cmd[0]) or cmd[0]
    return [exe] + cmd[1:]


def run_node(cmd: List[str], env: Dict[str, str]) -> int:
    # torchrun sets 1 thread per rank anyway; saying so ourselves keeps its banner out of every run's output
    full_env = {"OMP_NUM_THREADS": "1", **os.environ, **env}
    return subprocess.run(resolve_executable(cmd), env=full_env).returncode


def failed_rank_log(run_dir: str) -> Optional[str]:
    """The log of the first rank whose stderr holds a traceback (torchrun's --log_dir layout)."""
    for path in sorted(glob.glob(os.path.join(run_dir, "logs", "*", "attempt_*", "*", "stderr.log"))):
        with open(path, errors="replace") as f:
            if "Traceback" in f.read():
                return path
    return None


def tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])
