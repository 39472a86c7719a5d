"""Shared test helpers: compose configs through Hydra's API, run the app as a user would, and require components.

A test that needs a missing component skips locally with the reason and FAILS in CI (CI=true): CI must not go
green by skipping.
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from trl_ds.config.compose import compose

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip locally, fail in CI, when a real component is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"missing in CI: {reason}")
    pytest.skip(reason)


# The kind of machine CI runs on: cpu (no GPU, the default) or gpu. No one machine runs every test (a node without
# GPUs is part of what some tests need), so CI names its kind, and a test for the other kind is the only skip it takes.
CI_MACHINE = os.environ.get("TRL_DS_CI_MACHINE", "cpu")


def require_machine(gpu: bool) -> None:
    """A test for one kind of machine: `gpu` (marker `gpu`: torch sees CUDA) or none (marker `no_gpu`: nvidia-smi lists
    no GPU). On the other kind it skips locally; in CI it skips only where TRL_DS_CI_MACHINE says CI is the other
    kind, and fails otherwise (CI on a machine that is not what it says)."""
    if gpu:
        here = __import__("torch").cuda.is_available()
    else:
        from trl_ds.check.validate import count_gpus
        here = count_gpus() == 0
    if here:
        return
    reason = "needs a CUDA GPU" if gpu else "needs a machine without GPUs (this one has some)"
    if IN_CI and (CI_MACHINE == "gpu") == gpu:
        pytest.fail(f"missing in CI: {reason} (TRL_DS_CI_MACHINE={CI_MACHINE})")
    pytest.skip(reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_gpu: needs a machine without GPUs; skipped on one (require_machine)")


def pytest_runtest_setup(item):
    """The `gpu` and `no_gpu` markers go through require_machine: the one way a test skips for the machine's kind."""
    for marker, gpu in (("gpu", True), ("no_gpu", False)):
        if item.get_closest_marker(marker):
            require_machine(gpu)


@pytest.fixture
def compose_cfg():
    """compose_cfg(["zero=stage3", ...]) -> the typed config the app would see."""
    yield compose
    GlobalHydra.instance().clear()


def run_app(args, run_dir, module="trl_ds", timeout=900, env=None):
    """Run `python -m trl_ds ARGS hydra.run.dir=RUN_DIR` as a user would; returns CompletedProcess.

    timeout: the seconds the launch may WAIT (communicate_waiting: not the time it runs or queues for a CPU, so a
    busy machine slows it without failing it). Past it, or on the test's own time limit, the whole process group goes
    (torchrun and its ranks too), so no orphan keeps a port, a build lock or the CPU from the tests that follow; the
    failure shows the tail of every rank's log."""
    cmd = [sys.executable, "-m", module, *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        _, stdout, stderr, _ = communicate_waiting(proc, timeout, explain=lambda: log_tails(Path(run_dir)))
    except BaseException:  # past its limit, the test's own time limit (pytest-timeout) or ^C: its ranks go too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_for_cpu(cmd, **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """subprocess.run, and the CPU seconds the process used. Part 1 of the suite runs at nice 19 beside part 2's
    launches, so wall time there says more about part 2 (CI: 4-9 s of wall for a plan of 0.5 s of CPU)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def log_tails(run_dir: Path, lines: int = 15) -> str:
    tails = []
    for log in sorted(run_dir.glob("logs/**/*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.relative_to(run_dir)}\n" + "\n".join(text))
    return "\n".join(tails) or "(none written)"


def read_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def test_hosts(tmp_path_factory):
    """Two test hosts with their own addresses (tests/integration/hosts.py: network namespaces, 10.88.0.1 and .2 on
    eth1, an sshd in each), torn down after the session."""
    from tests.integration.hosts import TestHosts, missing_components

    missing = missing_components()
    require(not missing, f"test hosts need {', '.join(missing)}")
    hosts = TestHosts(tmp_path_factory.mktemp("test_hosts")).start()
    yield hosts
    hosts.stop()


SLURM_CLUSTER = REPO / "scripts" / "slurm_cluster.sh"
SLURM_TOOLS = ("slurmctld", "slurmd", "munged", "munge", "sbatch", "squeue", "scontrol", "srun")


def free_port_block(count: int) -> int:
    """A base port with `count` free ports from it (slurmctld, then one per slurmd)."""
    import random
    import socket

    for _ in range(50):
        base = random.randint(20000, 60000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port block")


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory):
    """A real 2-node SLURM cluster on this machine (scripts/slurm_cluster.sh), once per session for every module that
    submits to it (test_slurm, test_sweep); its environment: SLURM_CONF."""
    require(os.geteuid() == 0, "the local SLURM cluster runs its daemons as root")
    missing = [tool for tool in SLURM_TOOLS if not shutil.which(tool)]
    require(not missing, f"SLURM is not installed ({', '.join(missing)} missing): apt-get install -y slurm-wlm "
                         f"munge (scripts/setup_test_env.sh does it as root)")
    folder = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "TRL_DS_SLURM_PORT": str(free_port_block(3))}
    started = subprocess.run(["bash", str(SLURM_CLUSTER), "start", str(folder)], env=env, capture_output=True,
                             text=True, timeout=180)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield {"SLURM_CONF": str(folder / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SLURM_CLUSTER), "stop", str(folder)], env=env, timeout=180)


def torch_default_tag() -> str:
    """The <py+device> level of torch's default extensions folder (cpp_extension._get_build_directory)."""
    import torch

    device = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    return f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{device}"


USER_OPS = os.environ.get("TORCH_EXTENSIONS_DIR")  # the user's, before own_op_cache replaces it


def user_op_folder(op: str) -> Path:
    """Where the user's built op is: $TORCH_EXTENSIONS_DIR/<op>, else torch's default folder."""
    if USER_OPS:
        return Path(USER_OPS) / op
    # torch's get_default_build_root, without importing cpp_extension (it imports setuptools, whose vendored
    # packages then join sys.path and show in importlib.metadata: tests/unit/launch/test_env.py)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(os.path.realpath(os.path.join(cache, "torch_extensions"))) / torch_default_tag() / op


def copy_op_cache(dest: Path, ops=("deepspeed_shm_comm",)) -> Path:
    """The user's built DeepSpeed ops, copied with their mtimes (so nothing rebuilds) into torch's default layout under
    dest (XDG_CACHE_HOME=dest), without a lock. Returns the copy's <py+device> folder (TORCH_EXTENSIONS_DIR for the
    same op folders)."""
    tag = dest / "torch_extensions" / torch_default_tag()
    for op in ops:
        real = user_op_folder(op)
        require((real / f"{op}.so").exists(), f"DeepSpeed op {op} is not built (trl-ds build-ops {op})")
        shutil.copytree(real, tag / op, ignore=shutil.ignore_patterns("lock", "lock.*"), dirs_exist_ok=True)
    return tag


@pytest.fixture(scope="session", autouse=True)
def own_op_cache(tmp_path_factory):
    """Every test (and every process it starts) loads DeepSpeed's ops from a copy of the user's built ones, without
    their locks: no test waits on, removes or depends on a lock in the user's cache, or locks it for someone else."""
    from trl_ds.launch.build_ops import BUILDERS

    built = [op for op in BUILDERS if (user_op_folder(op) / f"{op}.so").exists()]
    tag = copy_op_cache(tmp_path_factory.mktemp("op_cache"), built)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(tag))
        yield tag


@pytest.fixture(scope="session", autouse=True)
def own_trl_ds_cache(tmp_path_factory):
    """trl_ds's cache (counts, accepted parser verdicts) starts empty in each session, whatever earlier runs kept."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRL_DS_CACHE", str(tmp_path_factory.mktemp("trl_ds_cache")))
        yield


def pytest_collection_modifyitems(items):
    """Everything under tests/integration is an integration test, marked or not: scripts/run_tests.sh selects by it."""
    folder = REPO / "tests" / "integration"
    for item in items:
        if folder in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    # tests that time what they run go last: scripts/run_tests.sh runs the unit tests beside the integration tests'
    # first minutes
    items.sort(key=lambda item: Path(str(item.fspath)).name in TIMED_LAST)  # stable: the rest keep their order


TIMED_LAST = ("test_bench.py", "test_calibration.py")  # bounds in seconds; the calibration ranks measured step times


TEST_TIMES = os.environ.get("TRL_DS_TEST_TIMES")  # a JSON Lines file: each test's wall and CPU seconds, its own
# process and the processes it started and waited for (scripts/run_tests.sh sets it; the suite's time budget is
# planned from it: a test whose CPU is far below its wall mostly waits)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not TEST_TIMES:
        yield
        return
    import resource
    import time

    def cpu():
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    start, cpu_start = time.monotonic(), cpu()
    yield
    with open(TEST_TIMES, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - start, 2),
                            "cpu": round(cpu() - cpu_start, 2)}) + "\n")


# Time limits on subprocesses, load-independent. A test's bound on how long a product may take counts the time its
# processes WAITED (wall time less the time any of them ran or stood ready for a CPU: /proc's CPU ticks and the
# scheduler's run delay), not wall time: beside other work, and at nice 19 in make test's part 1 (about 1.5 % of a
# core against normal-priority work), a process that is ready but not running is slow, not stuck, and a limit the
# product promises (a rendezvous timeout, a lock-wait limit) is still what it waits for.
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


class TreeClock:
    """How long a process and its descendants waited since it was made: wall time less the time the tree spent
    running or ready to run, interval by interval (between samples, the interval less what its processes ran or
    queued, at least 0): processes queueing in parallel shorten only their own interval, never a wait elsewhere."""

    def __init__(self, pid: int):
        import time

        self.pid, self.busy, self.waited_s = pid, {}, 0.0
        self.last, self.last_busy = time.monotonic(), 0.0

    def tree(self) -> list:
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found

    def sample(self) -> None:
        import time

        for pid in self.tree():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                run_delay_ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile: its last sample stands
            cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK  # utime + stime, every thread
            self.busy[pid] = max(self.busy.get(pid, 0.0), cpu + run_delay_ns / 1e9)
        now, busy = time.monotonic(), sum(self.busy.values())
        self.waited_s += max(0.0, (now - self.last) - (busy - self.last_busy))
        self.last, self.last_busy = now, busy

    def waited(self) -> float:
        """Up to the last sample, and the time since (the tree has ended, or is between samples) as waiting."""
        import time

        return self.waited_s + (time.monotonic() - self.last)


def communicate_waiting(proc, waited_s: float, poll_s: float = 0.5, explain=None):
    """proc.communicate(), ending the process tree only once it has WAITED waited_s seconds (TreeClock); returns
    (returncode, stdout, stderr, seconds it waited). A tree that runs or queues for a CPU is never ended by this;
    pytest-timeout (pyproject.toml) bounds the whole test. explain(): what a failure shows (default: stderr's end)."""
    clock = TreeClock(proc.pid)
    while True:
        try:
            out, err = proc.communicate(timeout=poll_s)
            return proc.returncode, out, err, clock.waited()
        except subprocess.TimeoutExpired:
            clock.sample()
            if clock.waited() > waited_s:
                for pid in reversed(clock.tree()):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                out, err = proc.communicate()
                shown = explain() if explain else (err or "")[-3000:]
                pytest.fail(f"{' '.join(map(str, proc.args))[:300]} waited {clock.waited():.0f} s (wall time less "
                            f"the time it ran or stood ready for a CPU), past {waited_s} s:\n{shown}")


def run_waiting(cmd, waited_s: float, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, ...) whose limit is on the time it waited (communicate_waiting), not
    on wall time."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    rc, out, err, _ = communicate_waiting(proc, waited_s)
    done = subprocess.CompletedProcess(cmd, rc, out, err)
    if check:
        done.check_returncode()
    return done
