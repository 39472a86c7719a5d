"""conftest's time limits count the time a subprocess tree waited, not wall time (#61 item 8, docs/testing.md): a
process that computes, or stands ready for a CPU on a busy machine, waits nothing; one that sleeps waits; and one
that waits past its limit is ended, its children too."""
import subprocess
import sys
import time

import psutil
import pytest
from conftest import communicate_waiting

pytestmark = pytest.mark.slow  # seconds of sleeping and spinning children: make test runs it, make test-fast does not
SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass"


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_computing_is_not_waiting_and_sleeping_is():
    _, _, _, spun = communicate_waiting(child(SPIN.format(s=3)), 60)
    _, _, _, slept = communicate_waiting(child("import time; time.sleep(2)"), 60)
    assert spun < 1.0  # 3 s of running or of standing ready for a CPU; at most one 0.5 s sample is missed at exit
    assert 1.5 < slept < 3.5


def test_a_childs_computing_counts_for_the_tree():
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SPIN.format(s=3)!r}])"
    _, _, _, waited = communicate_waiting(child(code), 60)
    assert waited < 1.5  # the parent waits on its child, which computes


def test_a_tree_that_waits_past_its_limit_is_ended_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\ntime.sleep(60)")
    proc = child(code)
    with pytest.raises(pytest.fail.Exception, match=r"waited \d+ s \(wall time less the time it ran or stood ready "
                                                    r"for a CPU\), past 2 s"):
        communicate_waiting(proc, 2)
    assert proc.returncode == -9
    grandchild = int(pid_file.read_text())
    # SIGKILL takes effect when the killed process is next scheduled: at nice 19 on a busy machine, a moment later
    deadline = time.monotonic() + 10
    while psutil.pid_exists(grandchild) and psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"grandchild {grandchild} still runs 10 s after its tree was ended"
        time.sleep(0.1)
