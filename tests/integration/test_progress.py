"""Watching a run while it runs: progress on a terminal (a pseudo-terminal here) and in a log file, and
`python -m trl_ds.cli.watch` attached to a running run, a finished one, and one whose rank is killed."""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, read_json

from tests.integration.test_resume import SLOW, rank_pid

pytestmark = pytest.mark.integration
TIMEOUT_S = 900


def start_app(args, run_dir, **popen):
    cmd = [sys.executable, "-m", "trl_ds", *args, f"hydra.run.dir={run_dir}"]
    return subprocess.Popen(cmd, cwd=REPO, start_new_session=True, **popen)


def start_watch(run_dir, every="1"):
    """As a user would: once the launch has written the run dir (its config.yaml) that it printed."""
    deadline = time.time() + TIMEOUT_S
    while not (run_dir / "config.yaml").exists() and time.time() < deadline:
        time.sleep(0.2)
    return subprocess.Popen([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir), "--every", every], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_terminal(master: int, proc: subprocess.Popen) -> str:
    """Everything the app wrote to its terminal, until it exits."""
    chunks, deadline = [], time.time() + TIMEOUT_S
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the app and its children are gone
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_shows_a_live_bar_and_watch_follows_the_run_to_its_end(tmp_path):
    run_dir = tmp_path / "run"
    master, slave = pty.openpty()
    app = start_app(["trainer.max_steps=40", *SLOW], run_dir, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    watcher = start_watch(run_dir)
    terminal = read_terminal(master, app)
    assert app.wait(timeout=60) == 0, terminal[-3000:]
    watched, _ = watcher.communicate(timeout=120)
    # the status line is redrawn in place (carriage return): every "step N/40" it drew, in order
    steps = [int(n) for n in re.findall(r"\rtrl_ds: step (\d+)/40 \| ", terminal.replace("\x1b[K", ""))]
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] == 40, terminal[-3000:]
    assert "loss" in terminal and "samples/s" in terminal
    assert "OMP_NUM_THREADS" not in terminal and "torch/distributed/run.py" not in terminal
    # watch: attached while it ran, printed progress lines, then the summary; exit 0 like the run
    assert watcher.returncode == 0, watched
    assert re.search(r"trl_ds watch: step \d+/40 \| ", watched), watched
    assert "trl_ds: run completed" in watched and "after 40 steps" in watched
    # on a finished run: the summary at once
    started = time.time()
    again = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
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
