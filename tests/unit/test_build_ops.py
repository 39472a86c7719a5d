"""Stale JIT build locks: refused before launch with the fix, cleared by `trl-ds build-ops`, and a lock a
build still holds is left alone."""
import subprocess
import sys

from conftest import REPO, run_app

from trl_ds.launch.build_ops import clear_stale_lock, stale_locks


def make_lock(root, op="cpu_adam"):
    folder = root / "py311_cpu" / op
    folder.mkdir(parents=True)
    (folder / "lock").write_text("")
    return folder


def test_launch_with_a_stale_lock_is_refused_with_the_fix(tmp_path):
    folder = make_lock(tmp_path / "ext")
    out = run_app(["zero=stage2", "offload=cpu"], tmp_path / "run", env={"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    assert out.returncode == 2, out.stderr
    assert (f"{folder / 'lock'} is left by a killed build of a DeepSpeed op (no build is running); this run "
            f"(offload.optimizer=cpu, offload.param=none) would wait on it forever. Run `trl-ds build-ops` "
            f"(it clears the lock and builds the op).") in out.stderr
    assert not (tmp_path / "run" / "logs").exists()  # nothing spawned


def test_only_the_ops_a_run_needs_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    make_lock(tmp_path, "async_io")
    assert stale_locks(["cpu_adam"]) == []
    assert stale_locks(["cpu_adam", "async_io"]) == [str(tmp_path / "py311_cpu" / "async_io" / "lock")]


def test_a_stale_lock_is_cleared_and_a_held_one_kept(tmp_path):
    stale, held = make_lock(tmp_path, "cpu_adam"), make_lock(tmp_path, "async_io")
    build = subprocess.Popen(["sleep", "30"], cwd=held)  # torch runs ninja in the op's folder
    try:
        assert clear_stale_lock(str(stale)) and not (stale / "lock").exists()
        assert not clear_stale_lock(str(held)) and (held / "lock").exists()
    finally:
        build.kill()


def test_unknown_op_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "trl_ds.launch.build_ops", "fused_lamb"], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 2
    assert "unknown op fused_lamb; choose from deepspeed_shm_comm, pin_memory, cpu_adam, async_io" in out.stderr
