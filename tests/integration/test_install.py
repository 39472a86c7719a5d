"""`pip install .` (a wheel, not editable) must carry the Hydra config tree."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_wheel_install_finds_its_config_tree(tmp_path):
    from conftest import REPO

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(REPO)], check=True, cwd=tmp_path)
    assert (target / "trl_ds" / "conf" / "zero" / "stage3.yaml").is_file()
    assert (target / "trl_ds" / "plan" / "hardware" / "h100-80gb.yaml").is_file()  # cluster.gpu presets: package data
    assert (target / "bin" / "trl-ds").is_file()  # the console script of [project.scripts]
    out = subprocess.run([sys.executable, "-m", "trl_ds", "zero=stage3", "dry_run=true",
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "trl_ds dry run: 1 node(s) × 2 cpu rank(s)" in out.stdout
    assert str(target / "trl_ds" / "__main__.py") in subprocess.run(
        [sys.executable, "-c", "import trl_ds.__main__ as m; print(m.__file__)"], cwd=tmp_path,
        capture_output=True, text=True, env={"PYTHONPATH": str(target)}).stdout
    plan = subprocess.run([sys.executable, str(target / "bin" / "trl-ds"), "plan", "cluster=1x8", "model=llama3-8b",
                           "cluster.gpu=h100-80gb", "--fits"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("trl_ds plan: llama3-8b (8.03B parameters")
