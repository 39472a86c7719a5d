"""Golden launch.sh, hostfile and sbatch.sh for 1x8, 2x8 and 4x8 GPU clusters, reviewed as diffs.

Regenerate after an intended change with:
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/launch/test_launch_golden.py
"""
import os
import subprocess

import pytest

from tests.conftest import REPO
from trl_ds.launch import build_commands, render_launch_files

GOLDEN = REPO / "tests" / "golden" / "launch"
RUN_DIR = "/scratch/runs/2026-12-02/10-00-00"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
LAUNCHERS = {
    "torchrun": [],
    "torchrun_c10d": ["launcher.rdzv_backend=c10d", "launcher.min_nodes=1"],
    "deepspeed": ["launcher=deepspeed", "cluster.hostfile=hostfiles/{cluster}.txt"],
    "deepspeed_no_ssh": ["launcher=deepspeed", "launcher.no_ssh=true", "cluster.hostfile=hostfiles/{cluster}.txt"],
    "slurm": ["launcher=slurm", "launcher.slurm.partition=gpu", "launcher.slurm.account=my-project",
              "launcher.slurm.time=04:00:00", "launcher.slurm.cpus_per_task=64", "launcher.slurm.job_name=llama3-8b-z3",
              "launcher.slurm.extra_sbatch=['--exclusive','--mem=0']"],
}
CASES = [(cluster, launcher) for cluster in ("1x8", "2x8", "4x8") for launcher in LAUNCHERS]


@pytest.mark.parametrize("cluster, launcher", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_launch_files_match_golden(compose_cfg, monkeypatch, cluster, launcher):
    monkeypatch.chdir(REPO)  # the shipped hostfiles, by the relative path a user types
    overrides = [f"cluster={cluster}", "model=llama3-8b", "zero=stage3", "+cluster.env.NCCL_SOCKET_IFNAME=ib0"]
    cfg = compose_cfg(overrides + [o.format(cluster=cluster) for o in LAUNCHERS[launcher]])
    files = render_launch_files(cfg, RUN_DIR, build_commands(cfg, RUN_DIR))
    folder = GOLDEN / cluster / launcher
    for name, text in files.items():
        path = folder / name
        if UPDATE:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.exists(), f"no golden {path}; run with UPDATE_GOLDEN=1 and review the new file"
        assert text == path.read_text(), f"{path} differs; if intended, rerun with UPDATE_GOLDEN=1 and review the diff"
        if name.endswith(".sh"):
            assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(files), f"stale files in {folder}"
