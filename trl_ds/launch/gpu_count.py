"""GPU counts are checked where the ranks run, not where the command is typed.

The launching process checks its own GPUs only when every rank runs on it; launch.sh checks each node's before its
launcher starts; for launcher=slurm, the partition's GPUs (sinfo's GRES) are compared with cluster.gpus_per_node."""
import os
import re
import shutil
import subprocess
from typing import List, Optional

from trl_ds.config.values import value

SINFO_TIMEOUT_S = 10
# Where sinfo finds its configuration when SLURM_CONF is not set: the Debian and source builds' default, and a
# configless node's copy fetched by its slurmd
SLURM_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf",
               "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")
GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


def node_gpu_check_lines(gpus_per_node: int, smi_limit_s: int = 10) -> List[str]:
    """Shell lines: count this node's usable GPUs and end at once, with one line, when there are too few.

    Usable: nvidia-smi's GPUs (or /dev/nvidiaN without it), no more than CUDA_VISIBLE_DEVICES lists (CUDA sees
    only those) and than SLURM allocated on this node (SLURM_GPUS_ON_NODE)."""
    need = gpus_per_node
    return [
        "# The ranks need this node's GPUs: stop before the launcher starts if there are fewer than it would use.",
        "if command -v nvidia-smi >/dev/null 2>&1; then",
        f"  SMI=0; LIST=\"$(timeout -k 5 {smi_limit_s} nvidia-smi -L 2>/dev/null)\" || SMI=$?",
        '  if [ "$SMI" = 124 ] || [ "$SMI" = 137 ]; then',
        '    refuse 1 "node $NODE_RANK (${SLURMD_NODENAME:-$(hostname)}): nvidia-smi -L did not answer within '
        f'{smi_limit_s} s; is the NVIDIA driver hung? (run nvidia-smi there by hand)"',
        "  fi",
        "  GPUS=\"$(printf '%s\\n' \"$LIST\" | grep -c '^GPU ' || true)\"",
        "else",
        "  GPUS=\"$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)\"",
        "fi",
        'if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then',
        "  VISIBLE=\"$(printf %s \"$CUDA_VISIBLE_DEVICES\" | tr , '\\n' | grep -cE '^([0-9]+|GPU-.+|MIG-.+)$' \\",
        "    || true)\"",
        '  [ "$VISIBLE" -lt "$GPUS" ] && GPUS="$VISIBLE"',
        "fi",
        'if [ -n "${SLURM_GPUS_ON_NODE:-}" ] && [ "$SLURM_GPUS_ON_NODE" -lt "$GPUS" ]; then',
        '  GPUS="$SLURM_GPUS_ON_NODE"',
        "fi",
        f'if [ "$GPUS" -lt {need} ]; then',
        '  if [ "$GPUS" -gt 0 ]; then FIX="cluster.gpus_per_node=$GPUS"; else FIX="cluster=local to train on CPU"; fi',
        f'  refuse 2 "node $NODE_RANK (${{SLURMD_NODENAME:-$(hostname)}}) has $GPUS usable GPU(s) but the run '
        f'starts {need} ranks per node (cluster.gpus_per_node={need}). Run on nodes with {need} GPUs, or rebuild '
        f'the run dir with $FIX."',
        "fi",
    ]


def partition_gpu_problems(cfg, env: Optional[dict] = None) -> List[str]:
    """launcher=slurm on CUDA (launchers.py asks it for that launcher only): refuse only when SLURM answers and no
    node of the partition has enough GPUs."""
    if value(cfg.cluster.device) != "cuda" or not shutil.which("sinfo"):
        return []
    if not slurm_configured(os.environ if env is None else env):
        return []  # sinfo would retry for 60 s before failing (a login node with SLURM's tools, not its config)
    partition = cfg.launcher.slurm.partition
    cmd = ["sinfo", "-h", "-o", "%P|%G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []  # no SLURM answers here (a laptop, a machine outside the cluster): nothing to compare
    rows = [line.split("|", 1) for line in out.stdout.splitlines() if "|" in line]
    if not partition:
        rows = [(p, g) for p, g in rows if p.endswith("*")]  # the default partition is marked with *
    return gres_problems(partition, rows, cfg.cluster.gpus_per_node)


def slurm_configured(env) -> bool:
    """A configuration sinfo can read: the file SLURM_CONF names, else one at SLURM's usual places. (A configless
    client that finds its controller only through DNS has neither: it is not asked, and the job's own check in
    launch.sh still refuses nodes with too few GPUs.)"""
    named = env.get("SLURM_CONF")
    return os.path.isfile(named) if named else any(os.path.isfile(path) for path in SLURM_CONFS)


def gres_problems(partition: Optional[str], rows: List[tuple], need: int) -> List[str]:
    """rows: (partition, GRES) as sinfo prints them, one per group of alike nodes. Pure."""
    where = f"launcher.slurm.partition={partition}" if partition else "SLURM's default partition"
    if not rows:
        return [f"{where}: SLURM knows no such partition here (sinfo lists none). Name one of `sinfo -s`'s "
                f"partitions with launcher.slurm.partition=NAME."] if partition else []
    gres = sorted({g.strip() for _, g in rows})
    most = max(gpu_count(g) for g in gres)
    if most >= need:
        return []
    name = partition or rows[0][0].rstrip("*")
    fix = f"cluster.gpus_per_node={most}" if most else "a partition with GPU nodes (launcher.slurm.partition=NAME)"
    return [f"{where}: the nodes of partition {name} have GRES {', '.join(gres)} (sinfo), so at most {most} GPU(s) "
            f"per node, but cluster.gpus_per_node={need}. Set {fix}, or choose a partition whose nodes have "
            f"{need} GPUs."]


def gpu_count(gres: str) -> int:
    """GPUs in one sinfo GRES field: gpu:8, gpu:a100:8(S:0-1), gpu:4,nvme:1, or (null)."""
    return sum(int(n) for n in GPU_GRES.findall(re.sub(r"\([^)]*\)", "", gres)))
