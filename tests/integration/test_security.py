"""Secrets never land in files; files follow the user's umask; hostile strings in config stay data in scripts."""
import hashlib
import os
import stat
import subprocess

import pytest
from conftest import read_json, run_app

pytestmark = pytest.mark.integration

SECRET = "hf_sekrit_0123456789"


def files_under(folder):
    return [p for p in folder.rglob("*") if p.is_file()]


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    """One 2-step run under umask 077 with secrets in the environment. A sitecustomize on the ranks' PYTHONPATH
    records, outside the run dir, the sha256 of the HF_TOKEN each rank sees: proof that the secret reached the
    ranks without the secret itself being written anywhere."""
    base = tmp_path_factory.mktemp("secrets")
    site, seen = base / "site", base / "seen"
    site.mkdir()
    seen.mkdir()
    (site / "sitecustomize.py").write_text(
        "import hashlib, os\n"
        "if 'LOCAL_RANK' in os.environ:\n"
        f"    with open(os.path.join({str(seen)!r}, 'rank_' + os.environ['RANK']), 'w') as f:\n"
        "        f.write(hashlib.sha256(os.environ.get('HF_TOKEN', '').encode()).hexdigest())\n")
    run_dir = base / "run"
    env = {"HF_TOKEN": SECRET, "WANDB_API_KEY": SECRET, "MY_PASSWORD": SECRET,
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    old = os.umask(0o077)
    try:
        out = run_app(["trainer.max_steps=2"], run_dir, env=env)
    finally:
        os.umask(old)
    assert out.returncode == 0, out.stderr
    return run_dir, out, seen


def test_secrets_reach_ranks_but_no_file(secret_run):
    run_dir, out, seen = secret_run
    assert read_json(run_dir / "summary.json")["status"] == "completed"
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert {p.name: p.read_text() for p in seen.iterdir()} == {"rank_0": digest, "rank_1": digest}
    leaks = [str(p) for p in files_under(run_dir) if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    assert SECRET not in out.stdout + out.stderr


def test_files_follow_the_umask_and_nothing_is_world_writable(secret_run):
    run_dir = secret_run[0]
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
