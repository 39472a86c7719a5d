"""torch's JIT op locks on a shared machine: who holds one, clearing one that nobody holds, and a wait with a limit.

torch takes `<op folder>/lock` (a FileBaton: an O_EXCL file, open until released) on each process's first load of an
op, and other loaders poll for it without a limit. Its holder has it open (/proc/<pid>/fd), so one nobody has open
was left by a killed process. `bound_op_lock_waits()` gives trl_ds's processes a wait that removes such a lock and
loads the op again, and ends after LIMIT_S ($TRL_DS_OP_LOCK_LIMIT_S) with one line naming the holder, exit code 2.
Imports nothing of trl_ds."""
import glob
import os
import sys
import time
from typing import List, Optional, Set

LIMIT_S = 1200  # a cold build of one op takes 1-5 min on 2 cores; a holder slower than this is named, not waited on
LIMIT_ENV = "TRL_DS_OP_LOCK_LIMIT_S"  # seconds, for nodes where a build takes longer (and for tests)
EXIT_REFUSED = 2  # trl_ds.errors.EXIT_USER_ERROR: a rank's refusal, which the launch's failure report says in its line
NOTICE_S = 5.0  # a wait this long is named: loading a built op holds the lock about a second
RECHECK_S = 1.0  # a holder closes the lock, then removes it: one seen unheld twice this far apart was left behind
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p",
              "fuse.sshfs", "fuse.glusterfs", "fuse.ceph", "afs"}


class OpLockTimeoutError(RuntimeError):
    """A lock a live process (or one this machine cannot see) held for longer than LIMIT_S."""


def extensions_root() -> str:
    """torch's `_get_build_directory`: $TORCH_EXTENSIONS_DIR/<op>, else <cache>/torch_extensions/<py+device>/<op>."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.environ["TORCH_EXTENSIONS_DIR"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")  # torch._appdirs.user_cache_dir
    return os.path.join(cache, "torch_extensions")


def lock_files(ops) -> List[str]:
    """The existing locks of these ops (without importing torch: every <py+device> folder of the default root)."""
    root = extensions_root()
    pattern = "{}" if os.environ.get("TORCH_EXTENSIONS_DIR") else os.path.join("*", "{}")
    return sorted(lock for op in ops for lock in glob.glob(os.path.join(root, pattern.format(op), "lock")))


def holders(lock: str) -> Set[int]:
    """The pids of this machine's processes that have the lock file open (torch's holder keeps it open)."""
    target = safe_stat(lock)
    if target is None:
        return set()
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or another user's process (see unseen_reason)
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
                found.add(int(pid))
                break
    return found


def unseen_reason(lock: str) -> Optional[str]:
    """Why a holder of this lock might not show in this machine's /proc; None when every possible holder would."""
    path = os.path.realpath(lock)
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1:3] for line in f]
    point, kind = max(((p, k) for p, k in mounts if path == p or path.startswith(p.rstrip("/") + "/")),
                      key=lambda m: len(m[0]), default=("/", ""))
    if kind in NETWORK_FS:
        return f"it is on a shared file system ({kind} at {point}): a process on another host may hold it"
    if os.getuid() != 0 and getattr(safe_stat(lock), "st_uid", os.getuid()) != os.getuid():
        return "another user made it, and that user's processes are hidden from this one"
    return None


def judge(lock: str) -> str:
    """'held' (a process has it open, or one may where this machine cannot see), 'stale', or 'gone'."""
    first = signature(lock)
    if first is None:
        return "gone"
    if holders(lock) or unseen_reason(lock):
        return "held"
    time.sleep(RECHECK_S)
    if signature(lock) != first:
        return "gone" if signature(lock) is None else "held"  # released, or taken again
    return "held" if holders(lock) else "stale"


def safe_stat(path: str):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def signature(lock: str):
    st = safe_stat(lock)
    return None if st is None else (st.st_ino, st.st_mtime_ns)


def clear_if_stale(lock: str) -> bool:
    """Remove the lock when no process holds it. It is renamed first and checked to be the file judged, so a lock
    taken again in between is put back, not lost."""
    judged = signature(lock)
    if judge(lock) != "stale":
        return False
    aside = f"{lock}.stale.{os.getpid()}"
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return False
    if signature(aside) != judged:  # a new holder's lock: give it back unless yet another was taken meanwhile
        try:
            os.link(aside, lock)
        except FileExistsError:
            pass
        os.remove(aside)
        return False
    os.remove(aside)
    return True


def cleared_line(lock: str) -> str:
    return f"trl_ds: removed {lock}: no process holds it (a process killed while loading the op left it)"


def run_ops(offload_places, device: str) -> List[str]:
    """The JIT ops a run's ranks load: cpu_adam for any offload, async_io for NVMe, DeepSpeed's CPU collectives.
    offload_places: where the optimizer and the parameters go (config.values.offloads(cfg).values())."""
    places = set(offload_places)
    ops = (["cpu_adam"] if places != {"none"} else []) + (["async_io"] if "nvme" in places else [])
    return ops + (["deepspeed_shm_comm"] if device == "cpu" else [])


def clear_left_locks(offload_places, device: str) -> List[str]:
    """Before a launch starts ranks: remove (and name on stderr) the run's ops' locks that killed processes left."""
    cleared = [lock for lock in lock_files(run_ops(offload_places, device)) if clear_if_stale(lock)]
    for lock in cleared:
        print(cleared_line(lock), file=sys.stderr, flush=True)
    return cleared


def wait_limit_s() -> float:
    """LIMIT_S, or $TRL_DS_OP_LOCK_LIMIT_S when set (read at each wait: a rank inherits it from its launcher)."""
    given = os.environ.get(LIMIT_ENV, "")
    try:
        return float(given) if given else LIMIT_S
    except ValueError:
        print(f"trl_ds: warning: {LIMIT_ENV}={given} is not a number of seconds; an op lock is waited on for at most "
              f"{LIMIT_S} s", file=sys.stderr, flush=True)
        return LIMIT_S


def wait_for(lock: str, poll_s: float = 0.1, limit_s: Optional[float] = None, notice_s: float = NOTICE_S) -> bool:
    """Wait while a live process holds the lock (named after notice_s); True when it was left behind and this wait
    removed it. limit_s: default wait_limit_s()."""
    limit_s = wait_limit_s() if limit_s is None else limit_s
    try:
        return _wait(lock, poll_s, limit_s, notice_s)
    finally:
        _tell_launcher(None)


def _wait(lock: str, poll_s: float, limit_s: float, notice_s: float) -> bool:
    started = checked = time.monotonic()
    named = False
    while os.path.exists(lock):
        now = time.monotonic()
        if now - checked >= RECHECK_S:
            checked = now
            if clear_if_stale(lock):
                print(cleared_line(lock), file=sys.stderr, flush=True)
                return True
        if now - started > limit_s:
            raise OpLockTimeoutError(timeout_line(lock, limit_s))
        if not named and now - started >= notice_s:
            named = True
            line = (f"trl_ds: waiting for torch's op lock {lock}, {holder_words(lock)}: it is loading or building the "
                    f"op (at most {limit_s:.0f} s)")
            print(line, file=sys.stderr, flush=True)
            _tell_launcher(line)
        time.sleep(poll_s)
    return False


WAITING_GLOB = "waiting_rank_*.txt"  # in a run dir's progress/: a rank's wait, for the launcher to show


def waiting_file(progress_dir: str, rank: int) -> str:
    return os.path.join(progress_dir, WAITING_GLOB.replace("*", str(rank)))


NOTICE = {"file": None}  # where this process tells its launcher that it waits (bound_op_lock_waits' notice_file)


def _tell_launcher(line: Optional[str]) -> None:
    """The wait also goes to a file the launcher polls (launch/progress.py), removed when the wait ends."""
    path = NOTICE["file"]
    if not path:
        return
    try:
        if line is None:
            if os.path.exists(path):
                os.remove(path)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(f"{path}.tmp", "w") as f:
            f.write(line + "\n")
        os.replace(f"{path}.tmp", path)
    except OSError:  # a notice, never a reason for a rank to fail
        pass


def holder_words(lock: str) -> str:
    pids = sorted(holders(lock))
    if pids:
        return f"held by pid {', '.join(map(str, pids))} ({command_of(pids[0])})"
    return f"held where this machine cannot see: {unseen_reason(lock)}"


def timeout_line(lock: str, limit_s: float) -> str:
    return (f"waited {limit_s:.0f} s for torch's op lock {lock}, {holder_words(lock)}. A build of a DeepSpeed op takes "
            f"minutes; if that process is stuck, stop it, or delete the lock if nothing is building the op.")


def command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())[:120] or "?"
    except OSError:
        return "?"


TORCH_WRITTEN_FOR = ((2, 4), (3, 0))  # [from, before): torch's FileBaton.wait and cpp_extension._jit_compile as read


def refuse_other_torch(version: str, has_both: bool) -> None:
    """The two torch functions replaced below are private: patched only in the torch versions they were read in
    (pyproject: torch>=2.4), refused in one line, exit code 2, elsewhere."""
    parts = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split("+")[0].split(".")[:2])
    low, high = TORCH_WRITTEN_FOR
    if not has_both or not low <= parts < high:
        print(f"trl_ds: refusing to patch torch's op loader (FileBaton.wait, cpp_extension._jit_compile): written for "
              f"torch {low[0]}.{low[1]} to before {high[0]}.{high[1]}, this environment has torch {version}"
              f"{'' if has_both else ' without them'}. Install torch>={low[0]}.{low[1]},<{high[0]}.{high[1]}.",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_REFUSED)


class _Cleared(Exception):
    """Raised out of torch's wait when the lock it waited on was left behind: the load starts over."""


def bound_op_lock_waits(notice_file: Optional[str] = None) -> None:
    """In this process, torch's op loads wait with `wait_for`: a lock left behind is removed and the op loaded (built)
    again; a live holder is waited on for at most wait_limit_s(), then the process ends with exit code 2 and one line
    that a launch's failure report reads as a rank's refusal (launch/rank_exits.py). notice_file: where a wait is also
    written for the launcher to show (a rank's progress/waiting_rank_K.txt)."""
    import torch
    from torch.utils import cpp_extension, file_baton

    refuse_other_torch(torch.__version__, hasattr(file_baton.FileBaton, "wait") and
                       hasattr(cpp_extension, "_jit_compile"))
    NOTICE["file"] = notice_file
    if getattr(cpp_extension._jit_compile, "trl_ds", False):
        return
    original = cpp_extension._jit_compile

    def wait(baton):
        try:
            cleared = wait_for(baton.lock_file_path, baton.wait_seconds)
        except OpLockTimeoutError as err:  # SystemExit, not the error: the op loads deep inside DeepSpeed, a Trainer
            # or a user's script, where an `except Exception` could hide it, and a raised error ends in a traceback
            print(f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_REFUSED) from None
        if cleared:
            raise _Cleared()

    def jit_compile(name, *args, **kwargs):
        while True:
            try:
                return original(name, *args, **kwargs)
            except _Cleared:  # forget the version torch recorded, so the retry runs ninja (a no-op when built)
                cpp_extension.JIT_EXTENSION_VERSIONER.entries.pop(name, None)

    jit_compile.trl_ds = True
    file_baton.FileBaton.wait = wait
    cpp_extension._jit_compile = jit_compile
