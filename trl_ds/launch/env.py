"""What this machine has, for trl_ds: `trl-ds env [--json] [--nvme-path PATH]`.

`collect_env` is the fast part, without torch (versions, GPUs and memory, host memory, libaio, SLURM commands, free
space where NVMe offload would write), written into every run dir as env.json; the CLI adds the slow part
(trl_ds/launch/env_probe.py): what `ds_report`, `accelerate env` and `trl env` tell, in one place."""
import contextlib
import ctypes.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Dict, List, Optional

PACKAGES = ("torch", "deepspeed", "trl", "transformers", "accelerate", "datasets", "peft", "hydra-core", "omegaconf",
            "tensorboard", "wandb")
SLURM_COMMANDS = ("sbatch", "srun", "squeue", "sinfo", "scontrol")
LIBAIO_HEADER = "/usr/include/libaio.h"
GiB = 2 ** 30
DEFAULT_NVME_PATH = os.path.join("outputs", "nvme")  # runs put swap files under <run dir>/nvme, below outputs/


def collect_env(nvme_path: Optional[str] = None) -> Dict:
    versions = installed_versions()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "memory_gb": host_memory_gb(),
        "packages": {name: versions.get(_normalize(name)) for name in PACKAGES},
        "gpus": list_gpus(),
        "libaio": {"library": ctypes.util.find_library("aio"), "header": os.path.exists(LIBAIO_HEADER)},
        "slurm": {name: shutil.which(name) for name in SLURM_COMMANDS},
        "nvme": free_space(nvme_path or DEFAULT_NVME_PATH),
    }


def installed_versions() -> Dict[str, str]:
    """Normalized name -> version, from the `name-version.dist-info` folder names on sys.path (first wins, as for
    imports). importlib.metadata parses every METADATA file with the email package: 60 ms of each dry run."""
    found: Dict[str, str] = {}
    for folder in sys.path:
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in entries:
            match = DIST_INFO.match(entry)
            if match:
                found.setdefault(_normalize(match["name"]), match["version"])
    return found


DIST_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(-py[^-]+)?\.(dist-info|egg-info)$")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


PROBE_TIMEOUT_S = 10


def list_gpus() -> List[str]:
    """GPU names and memory from nvidia-smi; an empty list on a CPU machine."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a GPU in a bad state can hang it; every launch records this (env.json)
        return [f"(nvidia-smi did not answer within {PROBE_TIMEOUT_S} s)"]
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def host_memory_gb() -> Dict[str, Optional[float]]:
    """Total and available host memory from /proc/meminfo (Linux); None elsewhere."""
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, amount = line.split(":", 1)
                fields[name] = int(amount.split()[0]) * 1024  # kB
    except OSError:
        pass
    return {key: round(fields[name] / GiB, 2) if name in fields else None
            for key, name in (("total", "MemTotal"), ("available", "MemAvailable"))}


def free_space(path: str) -> Dict:
    """Free space on the drive that would hold `path` (the nearest folder that exists)."""
    existing = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    usage = shutil.disk_usage(existing)
    return {"path": os.path.abspath(path), "free_gb": round(usage.free / GiB, 2),
            "total_gb": round(usage.total / GiB, 2)}


def format_env(env: Dict) -> str:
    """The report as lines of text, one topic per block."""
    from trl_ds.launch.env_probe import format_probe

    mem, nvme = env["memory_gb"], env["nvme"]
    lines = [f"python {env['python']} on {env['platform']} ({env['hostname']}, {env['cpu_count']} CPUs, "
             f"{mem['total']} GiB memory, {mem['available']} available)", "packages:"]
    lines += [f"  {name:<13} {version or 'not installed'}" for name, version in env["packages"].items()]
    lines.append("GPUs (nvidia-smi): " + ("; ".join(env["gpus"]) or "none"))
    lines.append(f"libaio (NVMe offload): library {env['libaio']['library'] or 'missing'}, header "
                 f"{'present' if env['libaio']['header'] else 'missing (apt-get install -y libaio-dev)'}")
    lines.append("SLURM: " + (", ".join(f"{k} {v or 'missing'}" for k, v in env["slurm"].items())))
    lines.append(f"NVMe path {nvme['path']}: {nvme['free_gb']} GiB free of {nvme['total_gb']}")
    if "probe" in env:
        lines += format_probe(env["probe"])
    return "\n".join(lines)


def print_env(nvme_path: str, as_json: bool = False) -> int:
    """`trl-ds env`: the fast part and the probe, as text or JSON on stdout."""
    from trl_ds.launch.env_probe import probe

    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout on import; keep stdout the report
        found = probe()
    env = {**collect_env(nvme_path), "probe": found}
    print(json.dumps(env, indent=2) if as_json else format_env(env))
    return 0
