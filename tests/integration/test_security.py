"""Secrets never land in files; files follow the user's umask; hostile strings in config stay data in scripts.
The secrets and the umask are checked on watched_run.py's run, which test_progress.py watches."""
import hashlib
import stat
import subprocess

import pytest
from conftest import read_json, run_app

from tests.integration.watched_run import SECRET, watched_run

pytestmark = pytest.mark.integration


def files_under(folder):
    return [p for p in folder.rglob("*") if p.is_file()]


def test_secrets_reach_ranks_but_no_file(tmp_path_factory):
    """SECRET in HF_TOKEN, WANDB_API_KEY and MY_PASSWORD: each rank saw HF_TOKEN (its digest, recorded outside the run
    dir), and no file of the run dir, nor the terminal or watch output, holds the secret."""
    run = watched_run(tmp_path_factory)
    run_dir = run["run_dir"]
    assert read_json(run_dir / "summary.json")["status"] == "completed"
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert {p.name: p.read_text() for p in run["seen"].iterdir()} == {"rank_0": digest, "rank_1": digest}
    leaks = [str(p) for p in files_under(run_dir) if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    assert SECRET not in run["terminal"] + run["watched"]


def test_files_follow_the_umask_and_nothing_is_world_writable(tmp_path_factory):
    run_dir = watched_run(tmp_path_factory)["run_dir"]  # launched under umask 077
    for path in files_under(run_dir):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    assert stat.S_IMODE((run_dir / "launch.sh").stat().st_mode) == 0o700


def test_hostile_run_dir_and_env_values_stay_data(tmp_path):
    """A run dir path and launcher.env values with quotes, ; $(...) and backticks: bash -n passes and running the
    script's preamble executes none of them."""
    canary = tmp_path / "PWNED"
    run_dir = tmp_path / f"run \"a\" $(touch {canary}); `touch {canary}`"
    hostile = f"x\"; touch {canary}; echo \"$(touch {canary})\" `touch {canary}`"
    out = run_app(["dry_run=true", f"+launcher.env.EXTRA_FLAGS='{hostile}'"], f"'{run_dir}'")
    assert out.returncode == 0, out.stderr
    script = run_dir / "launch.sh"
    assert f"export EXTRA_FLAGS='{hostile}'" in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # node rank 9 does not exist: the script exports its env, then stops with exit 2 before any launcher runs
    done = subprocess.run(["bash", str(script), "9"], capture_output=True, text=True)
    assert done.returncode == 2 and "NODE_RANK must be" in done.stderr
    assert not canary.exists()
