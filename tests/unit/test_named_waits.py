"""Nothing waits forever without a name (#41): a SLURM controller that never answers sbatch, and an nvidia-smi that
hangs (a GPU in a bad state), end at their limit with one line. Both commands are stand-ins on PATH that sleep: the
real ones cannot be made to hang here."""
import os

from trl_ds.launch import env as env_probe
from trl_ds.launch import slurm


def sleeping(tmp_path, name):
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexec sleep 60\n")
    (folder / name).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_sbatch_that_never_answers_ends_at_its_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(slurm, "SUBMIT_TIMEOUT_S", 1)
    (tmp_path / "sbatch.sh").write_text("#!/bin/bash\n")
    assert slurm.submit_job(str(tmp_path), {**os.environ, "PATH": sleeping(tmp_path, "sbatch")}) == 1
    assert capsys.readouterr().err == (
        f"trl_ds: sbatch did not answer within 1 s (is SLURM's controller up? sinfo says); nothing was submitted. "
        f"The job script is written: submit it with sbatch {tmp_path}/sbatch.sh\n")
    assert not (tmp_path / "slurm_job_id").exists()


def test_nvidia_smi_that_hangs_is_recorded_as_such(tmp_path, monkeypatch):
    monkeypatch.setattr(env_probe, "PROBE_TIMEOUT_S", 1)
    monkeypatch.setenv("PATH", sleeping(tmp_path, "nvidia-smi"))
    assert env_probe.list_gpus() == ["(nvidia-smi did not answer within 1 s)"]
