"""A process that holds an op folder's lock exactly as torch's loader does: torch's own FileBaton (loaded from its file
without importing torch, so it starts at once), its working directory outside the op folder. It releases the lock when
told, and exits 3 when by then the lock file is no longer its own (another process removed it)."""
import importlib.util
import os
import signal
import subprocess
import sys

FILE_BATON = os.path.join(importlib.util.find_spec("torch").submodule_search_locations[0], "utils", "file_baton.py")
SCRIPT = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("file_baton", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
baton = module.FileBaton(sys.argv[2])
if not baton.try_acquire():
    sys.exit(4)
print("held", flush=True)
sys.stdin.readline()
mine = os.path.exists(sys.argv[2]) and os.fstat(baton.fd).st_ino == os.stat(sys.argv[2]).st_ino
if mine:
    baton.release()
sys.exit(0 if mine else 3)
"""


class LockHolder:
    def __init__(self, lock, cwd):
        self.proc = subprocess.Popen([sys.executable, "-c", SCRIPT, FILE_BATON, str(lock)], cwd=cwd, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout.readline() == "held\n", f"the lock holder could not take {lock}"
        self.pid = self.proc.pid

    def release(self) -> int:
        """0: it released its own lock; 3: its lock had been removed by another process."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        """Killed while holding it: the lock stays behind, as after a killed load."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def stale_lock(lock, cwd) -> None:
    LockHolder(lock, cwd).kill()
