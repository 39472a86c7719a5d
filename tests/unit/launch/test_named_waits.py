"""Nothing waits forever without a name (#41): a SLURM controller that never answers sbatch or scontrol, an srun
whose plugins hang, and an nvidia-smi that hangs (a GPU in a bad state) end at their limit with one line. The
commands are stand-ins on PATH that sleep: the real ones cannot be made to hang here."""
import os
import subprocess
import time

import pytest

from trl_ds.launch import env as env_probe
from trl_ds.launch import slurm

pytestmark = pytest.mark.slow  # each test waits out a hung tool's limit: make test runs it, make test-fast does not


def sleeping(tmp_path, name, script="exec sleep 60"):
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{script}\n")
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


def test_srun_help_that_hangs_is_named_in_the_container_check(tmp_path, monkeypatch, compose_cfg):
    monkeypatch.setattr(slurm, "SRUN_HELP_TIMEOUT_S", 1)
    monkeypatch.setenv("PATH", sleeping(tmp_path, "srun"))
    cfg = compose_cfg(["launcher=slurm", "launcher.slurm.container_image=nvcr.io/nvidia/pytorch:24.05-py3"])
    started = time.monotonic()
    assert slurm.check_slurm_launcher(cfg) == [
        "launcher.slurm.container_image=nvcr.io/nvidia/pytorch:24.05-py3 needs the pyxis SPANK plugin, but srun "
        "--help did not answer within 1 s, so whether srun here has it is unknown. Check srun (its SPANK plugins, "
        "SLURM's config), or write the job without submitting it: launcher.slurm.submit=false."]
    assert time.monotonic() - started < 10


# scontrol as SLURM answers (hostnames: one name a line; show node: a NodeAddr), or not at all
SCONTROL = {"answers": 'case "$2" in hostnames) printf "gpu-a01\\ngpu-a02\\n";; node) echo "NodeName=$3 '
                       'NodeAddr=10.1.0.7 NodeHostName=$3";; esac',
            "no NodeAddr": 'case "$2" in hostnames) echo gpu-a01;; node) exit 1;; esac',
            "hangs": "exec sleep 60"}


@pytest.mark.parametrize("kind, expected", [("answers", "10.1.0.7"), ("no NodeAddr", "gpu-a01")])
def test_the_main_node_from_slurm_under_launch_sh_shell_options(tmp_path, monkeypatch, kind, expected):
    """The lines launch.sh runs under set -euo pipefail: a show node without an answer falls back to the name."""
    monkeypatch.setenv("PATH", sleeping(tmp_path, "scontrol", SCONTROL[kind]))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-a[01-02]")
    assert slurm.main_addr_from_slurm() == expected


def test_scontrol_that_never_answers_ends_at_its_limit_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "SCONTROL_TIMEOUT_S", 1)
    monkeypatch.setenv("PATH", sleeping(tmp_path, "scontrol", SCONTROL["hangs"]))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-a[01-02]")
    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        slurm.main_addr_from_slurm()
    assert time.monotonic() - started < 10
    line = ("trl_ds: scontrol show hostnames named no node of this job (SLURM_JOB_NODELIST=gpu-a[01-02]) within 1 s; "
            "is SLURM's controller up? (sinfo says)")
    assert ended.value.code == line  # printed by Python on stderr, exit code 1
    script = "\n".join(["set -euo pipefail", *slurm.refusal_lines(), *slurm.main_addr_from_slurm_lines(),
                        "echo unreached"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)  # as launch.sh runs it
    assert (done.returncode, done.stdout, done.stderr) == (1, "", line + "\n")


def test_watch_of_a_slurm_job_whose_squeue_never_answers_ends_at_its_limit(tmp_path, monkeypatch, capsys):
    from trl_ds.cli import watch

    monkeypatch.setattr(watch, "SQUEUE_TIMEOUT_S", 1)
    monkeypatch.setenv("PATH", sleeping(tmp_path, "squeue"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("{}\n")
    (run_dir / "slurm_job_id").write_text("4242\n")
    started = time.monotonic()
    assert watch.main([str(run_dir)]) == 1
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == (
        f"trl_ds watch: squeue -j 4242 did not answer within 1 s (is SLURM's controller up? sinfo says); the job's "
        f"state is unknown. Watch it again later with trl-ds watch {run_dir}\n")


def test_a_run_dir_flock_held_past_its_limit_ends_in_one_line(tmp_path, monkeypatch):
    """The run dir's flock (the judge of a stale launch lock) held by a stopped launcher: one line, not a hang."""
    import fcntl

    from trl_ds.errors import ConfigError
    from trl_ds.launch import run_dir_lock

    monkeypatch.setattr(run_dir_lock, "FLOCK_LIMIT_S", 0.3)
    held = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another open file description: flock conflicts within one process too
    start = time.monotonic()
    with pytest.raises(ConfigError) as err, run_dir_lock._serialised(str(tmp_path)):
        pass
    assert time.monotonic() - start < 5
    assert str(err.value) == (f"{tmp_path}: another process has held the run dir's flock (the judge of a stale launch "
                              f"lock) for 0.3 s; is a trl_ds launcher stopped there (fuser -v {tmp_path})? End it, "
                              "or give another hydra.run.dir.")
    os.close(held)
    with run_dir_lock._serialised(str(tmp_path)):  # released: taken at once
        pass
