"""`trl-ds build-ops`: JIT-build, once and one at a time, the DeepSpeed ops that offloaded runs need.

An op not yet built is otherwise compiled inside the ranks after they spawned (cpu_adam and async_io take minutes);
built ahead, in one process, the wait is a visible setup step with a time per op. A lock that no process holds is
removed first; one a live process holds is waited on (trl_ds/op_locks.py). On a cluster, run it once per node image."""
import contextlib
import os
import sys
import time
from typing import List, Optional

from trl_ds.launch import spawn_env
from trl_ds.op_locks import bound_op_lock_waits, clear_if_stale, cleared_line

# Accelerator builder names for the ops trl_ds's offload paths JIT-build (the accelerator maps them to its own
# implementation; ops it lacks, such as the shared-memory CPU collectives on a GPU, are skipped).
BUILDERS = {"deepspeed_shm_comm": "ShareMemCommBuilder", "pin_memory": "PinMemoryBuilder",
            "cpu_adam": "CPUAdamBuilder", "async_io": "AsyncIOBuilder"}


def build(name: str, say_cleared: bool = False) -> Optional[str]:
    """Build (or load from the cache) one op; None when this accelerator has no such op or cannot build it here.
    say_cleared: a stale lock removed is also said in the line every other command prints (trl-ds calibrate)."""
    from deepspeed.accelerator import get_accelerator
    from torch.utils.cpp_extension import _get_build_directory

    builder = get_accelerator().create_op_builder(BUILDERS[name])
    if builder is None or not builder.is_compatible(verbose=False):
        return None
    folder = _get_build_directory(builder.name, verbose=False)
    lock = os.path.join(folder, "lock")
    note = "cleared a stale build lock; " if clear_if_stale(lock) else ""
    if note and say_cleared:
        print(cleared_line(lock), file=sys.stderr, flush=True)
    library = os.path.join(folder, f"{builder.name}.so")
    before = os.path.getmtime(library) if os.path.isfile(library) else None
    builder.load(verbose=False)
    return note + ("cached" if before == os.path.getmtime(library) else "built")


def build_ops(names: List[str]) -> int:
    """`trl-ds build-ops`: build each of `names` (keys of BUILDERS), one line per op; the exit code."""
    # Build with the ninja the ranks use (the venv's, first on their PATH): ninja versions do not share a build
    # log, and a build made by another ninja is rebuilt from scratch by the next run.
    os.environ["PATH"] = spawn_env()["PATH"]
    bound_op_lock_waits()  # a lock a live process holds is waited on (with a limit), never removed
    for name in names:
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed and ninja log to stdout
            result = build(name)
        print(f"{name:<20} {result or 'not available on this accelerator or machine'} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    return 0
