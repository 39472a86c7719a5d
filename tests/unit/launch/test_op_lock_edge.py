"""Stale op locks are cleared at the launch edge, not while checking: validating a config (a dry run, a plan, the
launch's own checks) leaves the machine as it is, and the launch's start removes a lock a killed load left."""
import os

from trl_ds.check.validate import validate
from trl_ds.launch import build_commands, start
from trl_ds.op_locks import run_ops

# launcher=slurm with submit=false: start() writes nothing and spawns nothing, so the edge runs without ranks
NO_RANKS = ["launcher=slurm", "launcher.slurm.submit=false"]


def test_validating_keeps_a_left_lock_and_the_launch_start_removes_it(compose_cfg, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    (tmp_path / "ext" / "deepspeed_shm_comm").mkdir(parents=True)
    lock = tmp_path / "ext" / "deepspeed_shm_comm" / "lock"
    lock.touch()  # torch's FileBaton of a process killed while loading the op: nobody holds it open
    cfg = compose_cfg(NO_RANKS)
    run_dir = str(tmp_path / "run")
    validate(cfg, run_dir, launching=True)
    assert lock.exists()
    os.makedirs(run_dir)
    assert start(cfg, build_commands(cfg, run_dir)) == 0
    assert not lock.exists()
    assert f"trl_ds: removed {lock}: no process holds it" in capsys.readouterr().err


def test_the_ops_a_run_loads():
    """DeepSpeed builds cpu_adam for any CPU/NVMe offload, async_io for NVMe, shm_comm for CPU collectives."""
    assert run_ops(["none", "none"], "cuda") == []
    assert run_ops(["cpu", "none"], "cuda") == ["cpu_adam"]
    assert run_ops(["nvme", "nvme"], "cuda") == ["cpu_adam", "async_io"]
    assert run_ops(["none", "none"], "cpu") == ["deepspeed_shm_comm"]
