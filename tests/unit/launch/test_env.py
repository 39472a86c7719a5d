"""`trl-ds env`: this machine as trl_ds sees it; the fast part (env.json) never imports torch."""
import json
import os
import shutil
import subprocess
import sys

from conftest import REPO


def test_fast_part_needs_no_torch():
    code = ("import json, sys; from trl_ds.launch.env import collect_env; env = collect_env('/tmp/x/nvme'); "
            "print(json.dumps(env)); assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    env = json.loads(out.stdout)
    assert env["packages"]["deepspeed"] and env["packages"]["trl"]
    assert env["memory_gb"]["total"] > 0 and env["cpu_count"] == os.cpu_count()
    assert env["nvme"]["path"] == "/tmp/x/nvme" and env["nvme"]["free_gb"] > 0
    assert env["slurm"]["sbatch"] == shutil.which("sbatch")
    assert env["libaio"]["header"] == os.path.exists("/usr/include/libaio.h")


def test_package_versions_agree_with_importlib_metadata():
    """env.json reads versions from dist-info folder names (fast); every installed distribution must agree."""
    from importlib import metadata

    from trl_ds.launch.env import _normalize, installed_versions

    found = installed_versions()
    dists = list(metadata.distributions())
    assert len(dists) > 50
    assert {_normalize(d.metadata["Name"]): d.version for d in dists}.items() <= found.items()
