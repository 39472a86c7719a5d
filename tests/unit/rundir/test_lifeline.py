"""The parent-death signal a launch's children get (trl_ds/rundir/lifeline.py), read back from the kernel."""
import signal
import subprocess
import sys

# prctl(PR_GET_PDEATHSIG = 2, &sig) in the child itself (linux/prctl.h)
READ_PDEATHSIG = "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)"


def test_the_child_gets_the_signal_and_loads_no_library_between_fork_and_exec(monkeypatch):
    import ctypes

    from trl_ds.rundir.lifeline import die_with_parent

    preexec = die_with_parent(signal.SIGTERM)

    def loading(*args, **kwargs):
        raise AssertionError("a library loaded between fork and exec")

    monkeypatch.setattr(ctypes, "CDLL", loading)  # in this process only: the child's exec'd python is its own
    out = subprocess.run([sys.executable, "-c", READ_PDEATHSIG], preexec_fn=preexec, capture_output=True, text=True)
    assert out.stdout.strip() == str(int(signal.SIGTERM))
    plain = subprocess.run([sys.executable, "-c", READ_PDEATHSIG], capture_output=True, text=True)
    assert plain.stdout.strip() == "0"
