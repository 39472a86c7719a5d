"""Ending the deepspeed runner's remote share of a launch over ssh: the per-node launchers and their ranks.
The runner's own stop (`pkill -f` on every host) ends every DeepSpeed launch there; this matches only this run dir's.
"""
import re
import shlex
import subprocess
from typing import Dict, List

from trl_ds.rundir.layout import node_log_dir

KILL_TIMEOUT_S = 30


def end_remote_launchers(hosts: List[str], run_dir: str, env: Dict[str, str]) -> None:
    """SIGTERM this run's deepspeed.launcher.launch on each host; it ends its ranks on the way out."""
    pattern = f"deepspeed[.]launcher[.]launch .*--enable_each_rank_log={re.escape(node_log_dir(run_dir, ''))}"
    # %% : pdsh would put the node's rank in place of a bare %n.
    command = f"pkill -TERM -f -- {shlex.quote(pattern)} || true".replace("%", "%%")
    try:
        subprocess.run(["pdsh", "-R", "ssh", "-w", ",".join(hosts), command], env=env, capture_output=True,
                       timeout=KILL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):  # a host that no longer answers keeps what runs there
        pass
