"""What the benchmarks share (scripts/bench/bench.py and bench_accelerate.py): timing a command as a user runs it,
the spread of n runs, and the machine it ran on."""
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
BIN = os.path.dirname(PY)
sys.path.insert(0, REPO)
from trl_ds.launch import spawn_env  # noqa: E402

# Both sides run as from an activated venv: its torchrun, and its ninja for DeepSpeed's JIT ops (another ninja
# would rebuild them from scratch, see trl_ds/launch/build_ops.py).
ENV = spawn_env()


def timed(cmd, cwd=REPO):
    """Wall seconds, exit code, peak RSS (MiB) of the process tree's largest child, and its output."""
    with tempfile.TemporaryFile(mode="w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        return wall, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, out.read()


def stats(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def compare(ours, theirs, digits=2):
    """theirs/ours as text, or "no difference measured" where the min-max spreads overlap."""
    if ours["max"] < theirs["min"] or theirs["max"] < ours["min"]:
        return f"{theirs['median'] / ours['median']:.{digits}f}×"
    return "no difference measured"


def fmt(s, unit="s"):
    unit = f" {unit}" if unit else ""
    return f"{s['median']:.2f}{unit} (min {s['min']:.2f}, max {s['max']:.2f}, n={s['n']})"


def trl_ds(*overrides, run_dir):
    return [PY, "-m", "trl_ds", *overrides, f"hydra.run.dir={run_dir}"]


def machine():
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    versions = {p: metadata.version(p) for p in ("torch", "deepspeed", "trl", "transformers", "accelerate",
                                                 "hydra-core")}
    return {"cores": os.cpu_count(), "memory_gib": round(mem, 1), "python": platform.python_version(), **versions}


def load():
    return "/".join(f"{x:.2f}" for x in os.getloadavg())
