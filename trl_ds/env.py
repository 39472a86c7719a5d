"""What this machine has: versions and devices, without importing torch. Written into every run dir as env.json."""
import os
import platform
import socket
import subprocess
import shutil
from importlib import metadata
from typing import Dict

PACKAGES = ("torch", "deepspeed", "trl", "transformers", "accelerate", "datasets", "hydra-core", "omegaconf")


def collect_env() -> Dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "packages": {name: _version(name) for name in PACKAGES},
        "gpus": list_gpus(),
    }


def _version(name: str):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def list_gpus():
    """GPU names and memory from nvidia-smi; an empty list on a CPU machine."""
    if not shutil.which("nvidia-smi"):
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
