"""Watching a run while it runs: progress on a terminal (a pseudo-terminal here) and in a log file, and
`python -m trl_ds.cli.watch` attached to a running run, a finished one, and one whose rank is killed. The terminal's
run is watched_run.py's, which test_security.py reads too."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, read_json

from tests.integration.test_resume import SLOW, rank_pid
from tests.integration.watched_run import STEPS, TIMEOUT_S, start_app, start_watch, watched_run

pytestmark = pytest.mark.integration


def test_a_terminal_shows_a_live_bar_and_watch_follows_the_run_to_its_end(tmp_path_factory):
    run = watched_run(tmp_path_factory)  # test_security.py reads the same run
    terminal, watched = run["terminal"], run["watched"]
    assert run["returncode"] == 0, terminal[-3000:]
    # the status line is redrawn in place (carriage return): every "step N/40" it drew, in order
    steps = [int(n) for n in re.findall(rf"\rtrl_ds: step (\d+)/{STEPS} \| ", terminal.replace("\x1b[K", ""))]
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] == STEPS, terminal[-3000:]
    assert "loss" in terminal and "samples/s" in terminal
    assert "OMP_NUM_THREADS" not in terminal and "torch/distributed/run.py" not in terminal
    # watch: attached while it ran, printed progress lines, then the summary; exit 0 like the run
    assert run["watch_returncode"] == 0, watched
    assert re.search(rf"trl_ds watch: step \d+/{STEPS} \| ", watched), watched
    assert "trl_ds: run completed" in watched and f"after {STEPS} steps" in watched
    # on a finished run: the summary at once
    started = time.time()
    again = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run["run_dir"])], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "trl_ds: run completed" in again.stdout, again.stderr
    assert time.time() - started < 60  # no waiting for a run that ended (a bound, not a timing)


def test_log_file_progress_and_watch_exit_with_a_killed_ranks_failure(tmp_path):
    run_dir = tmp_path / "run"
    log = tmp_path / "terminal.log"
    with open(log, "w") as out:
        app = start_app(["trainer.max_steps=400", "launcher.progress_every_s=1", *SLOW], run_dir, stdout=out,
                        stderr=subprocess.STDOUT)
        watcher = start_watch(run_dir)
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline and app.poll() is None:
            # killed once the log shows two progress lines (one a second): a fast machine reaches any fixed step
            # count within the first second
            shown = len(re.findall(r"^trl_ds: step \d+/400 \| ", log.read_text(), re.MULTILINE))
            if shown >= 2 and rank_pid(run_dir, 1):
                os.kill(rank_pid(run_dir, 1), signal.SIGKILL)
                break
            time.sleep(0.2)
        assert app.wait(timeout=TIMEOUT_S) == 1
    watched, _ = watcher.communicate(timeout=120)
    printed = log.read_text()
    lines = re.findall(r"^trl_ds: step (\d+)/400 \| ", printed, re.MULTILINE)
    assert len(lines) >= 2 and [int(n) for n in lines] == sorted(int(n) for n in lines), printed[-3000:]
    assert "OMP_NUM_THREADS" not in printed
    assert "trl_ds: launch failed: rank 1" in printed
    assert watcher.returncode == 1, watched
    assert "trl_ds: run FAILED" in watched
    assert read_json(run_dir / "summary.json")["status"] == "failed"
