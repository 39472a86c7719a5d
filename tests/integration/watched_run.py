"""One real run watched as a user would, made once per session and read by two modules: test_progress.py (its live
bar on a pseudo-terminal, `python -m trl_ds.cli.watch` attached until it ends) and test_security.py (the secrets in
its environment reach the ranks but no file and no output; under umask 077 every file it writes stays private).
Neither setting touches what the other module checks, and a launch costs ~10 s whatever it trains: one run serves
both.
"""
import json
import os
import pty
import select
import subprocess
import sys
import time

from tests.conftest import REPO
from tests.integration.test_resume import SLOW

TIMEOUT_S = 900
STEPS = 40
SECRET = "hf_sekrit_0123456789"
SECRET_VARS = ("HF_TOKEN", "WANDB_API_KEY", "MY_PASSWORD")
# On each rank (not torchrun itself), the sha256 of the HF_TOKEN it sees, written outside the run dir: proof that the
# secret reached the ranks without the secret itself being written anywhere.
RECORD_TOKEN = ("import hashlib, os\n"
                "if 'LOCAL_RANK' in os.environ:\n"
                "    with open(os.path.join({folder!r}, 'rank_' + os.environ['RANK']), 'w') as f:\n"
                "        f.write(hashlib.sha256(os.environ.get('HF_TOKEN', '').encode()).hexdigest())\n")


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


def watched_run(tmp_path_factory) -> dict:
    """The 40-step run (SLOW's larger model, so the bar is redrawn several times) on a pseudo-terminal, with watch
    attached, under umask 077 with SECRET in SECRET_VARS; made on first use, kept in the session's base temp folder
    (the test modules are imported under two names, so a module-level cache would not be shared).

    Returns run_dir, seen (the folder of RECORD_TOKEN's digests), terminal (what the app wrote to it), returncode,
    watched (watch's output) and watch_returncode."""
    base = tmp_path_factory.getbasetemp() / "watched_run"
    outcome = base / "outcome.json"
    if not outcome.exists():
        site, seen = base / "site", base / "seen"
        for folder in (site, seen):
            folder.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(RECORD_TOKEN.format(folder=str(seen)))
        env = {**os.environ, **{name: SECRET for name in SECRET_VARS},
               "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        master, slave = pty.openpty()
        old = os.umask(0o077)  # the app and everything it starts inherit it; the test process keeps its own
        try:
            app = start_app([f"trainer.max_steps={STEPS}", *SLOW], base / "run", stdin=slave, stdout=slave,
                            stderr=slave, env=env)
        finally:
            os.umask(old)
        os.close(slave)
        watcher = start_watch(base / "run")
        terminal = read_terminal(master, app)
        returncode = app.wait(timeout=60)
        watched, _ = watcher.communicate(timeout=120)
        outcome.write_text(json.dumps({"terminal": terminal, "returncode": returncode, "watched": watched,
                                       "watch_returncode": watcher.returncode}))
    return {"run_dir": base / "run", "seen": base / "seen", **json.loads(outcome.read_text())}
