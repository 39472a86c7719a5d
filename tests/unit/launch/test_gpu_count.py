"""GPUs are counted where the ranks run: the launching host only for local launches, each node in launch.sh, and
SLURM's partition (sinfo GRES) for launcher=slurm."""
import subprocess
import time

import pytest

import trl_ds.check.validate as validate_mod
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError
from trl_ds.launch.gpu_count import gpu_count, gres_problems, node_gpu_check_lines, slurm_configured
from trl_ds.launch.launchers import ranks_run_here
from trl_ds.launch.slurm import refusal_lines


@pytest.mark.parametrize("gres, count", [("gpu:8", 8), ("gpu:a100:8(S:0-1)", 8), ("gpu:4,nvme:1", 4),
                                         ("gpu:a100:2,gpu:v100:2", 4), ("(null)", 0), ("nvme:1", 0)])
def test_gpus_in_a_gres_field(gres, count):
    assert gpu_count(gres) == count


def test_partition_gres_refuses_only_a_definite_mismatch():
    assert gres_problems("gpu", [("gpu", "gpu:8"), ("gpu", "gpu:4")], 8) == []  # some node has 8
    assert gres_problems("cpu", [("cpu", "(null)")], 8) == [
        "launcher.slurm.partition=cpu: the nodes of partition cpu have GRES (null) (sinfo), so at most 0 GPU(s) per "
        "node, but cluster.gpus_per_node=8. Set a partition with GPU nodes (launcher.slurm.partition=NAME), or choose "
        "a partition whose nodes have 8 GPUs."]
    assert gres_problems(None, [], 8) == []  # no default partition listed: nothing definite


@pytest.mark.parametrize("overrides, here", [
    (["cluster=1x8"], True),
    (["cluster=2x8"], False),  # each node's launch.sh counts its own
    (["cluster=1x8", "launcher=slurm"], False),
    (["cluster=1x8", "launcher=deepspeed"], True),  # the generated hostfile: localhost
    (["cluster=1x8", "launcher=deepspeed", "cluster.hostfile=hostfiles/1x8.txt"], True),  # localhost slots=8
    (["cluster=1x8", "launcher=deepspeed", "cluster.hostfile=remote.txt"], False),  # reached over ssh
])
def test_ranks_run_here(compose_cfg, overrides, here, monkeypatch, tmp_path):
    from tests.conftest import REPO

    (tmp_path / "hostfiles").symlink_to(REPO / "hostfiles")
    (tmp_path / "remote.txt").write_text("gpu-node-0 slots=8\n")
    monkeypatch.chdir(tmp_path)
    assert ranks_run_here(compose_cfg(overrides)) is here


@pytest.mark.parametrize("overrides", [["cluster=2x8"]])  # launcher=slurm: test_slurm.py::test_readme_slurm_command_*
def test_no_gpu_here_is_fine_when_the_ranks_run_elsewhere(compose_cfg, monkeypatch, overrides, tmp_path):
    monkeypatch.setattr(validate_mod, "count_gpus", lambda: 0)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "none.conf"))  # no SLURM answers
    validate(compose_cfg(overrides + ["model=llama3-8b", "zero=stage3"]), str(tmp_path / "run"), launching=True)
    with pytest.raises(ConfigError, match="but this machine has 0"):
        validate(compose_cfg(["cluster=1x8"]), str(tmp_path / "run"), launching=True)


def run_check(tmp_path, gpus_on_machine, env):
    """The launch.sh lines under bash, with an nvidia-smi listing `gpus_on_machine` GPUs first on PATH."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: H200 (UUID: GPU-{i})'\n"
                                                                   for i in range(gpus_on_machine)))
    (tmp_path / "nvidia-smi").chmod(0o755)
    script = "\n".join(["set -euo pipefail", "NODE_RANK=1", *refusal_lines(), *node_gpu_check_lines(8),
                        "echo started"])
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-7", **env})


def test_node_check_ends_in_one_line_when_nvidia_smi_hangs(tmp_path):
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 60\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    script = "\n".join(["set -euo pipefail", "NODE_RANK=1", *refusal_lines(), *node_gpu_check_lines(8, smi_limit_s=1),
                        "echo started"])
    start = time.monotonic()
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-7"})
    assert time.monotonic() - start < 10 and (out.returncode, out.stdout) == (1, "")
    assert out.stderr == ("trl_ds: node 1 (gpu-7): nvidia-smi -L did not answer within 1 s; is the NVIDIA driver hung? "
                          "(run nvidia-smi there by hand)\n")


def test_node_check_counts_usable_gpus(tmp_path):
    assert run_check(tmp_path, 8, {}).stdout == "started\n"
    assert run_check(tmp_path, 8, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}).stdout == "started\n"
    limited = run_check(tmp_path, 8, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert (limited.returncode, limited.stdout) == (2, "")
    assert limited.stderr == (
        "trl_ds: node 1 (gpu-7) has 2 usable GPU(s) but the run starts 8 ranks per node (cluster.gpus_per_node=8). "
        "Run on nodes with 8 GPUs, or rebuild the run dir with cluster.gpus_per_node=2.\n")
    assert "has 4 usable" in run_check(tmp_path, 8, {"SLURM_GPUS_ON_NODE": "4"}).stderr
    assert "has 0 usable" in run_check(tmp_path, 8, {"CUDA_VISIBLE_DEVICES": ""}).stderr
    assert "has 6 usable" in run_check(tmp_path, 6, {}).stderr


def test_sinfo_is_asked_only_where_a_slurm_config_exists(tmp_path):
    """Without one sinfo retries for 60 s ("s_p_parse_file: cannot stat file ..., retrying in 1sec up to 60sec", seen
    here): a login node with SLURM's tools but not its config would wait out the check's 10 s on every launch."""
    conf = tmp_path / "slurm.conf"
    assert not slurm_configured({"SLURM_CONF": str(conf)})
    conf.write_text("ClusterName=test\n")
    assert slurm_configured({"SLURM_CONF": str(conf)})
