"""Nothing lost, whatever happens to the run dir: a finished run rerun, resume=never over a history, a raised
max_steps, a damaged newest checkpoint in a copied run dir, another cluster shape, and two launches at once.

One uninterrupted 2-rank run (6 steps, a checkpoint every 3) is the reference; the other cases start from copies of
it (shutil.copytree), some cut back to the state a launch killed between checkpoint-3 and checkpoint-6 leaves.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
from conftest import REPO, read_json, require, run_app

pytestmark = pytest.mark.integration

# batch.global_size=12: the same 12 samples per optimizer step on 1, 2 or 3 ranks (accumulation 6, 3, 2).
BASE = ["trainer.max_steps=6", "checkpoint.every_steps=3", "batch.global_size=12"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("safety") / "reference"
    out = run_app(BASE, run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def complete_steps(run_dir):
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "trainer").glob("checkpoint-*")
                  if p.name.split("-")[1].isdigit() and (p / "trl_ds_complete.json").exists())


def snapshot(root, skip=None):
    """Every file under root (except under skip): size and modification time."""
    found = {}
    for folder, _, files in os.walk(root):
        if skip and os.path.commonpath([folder, skip]) == str(skip):
            continue
        for name in files:
            stat = os.stat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (stat.st_size, stat.st_mtime_ns)
    return found


def newest(paths):
    return max(paths, key=lambda p: p.stat().st_mtime)


def killed_copy(reference, dest):
    """The reference as a launch killed between checkpoint-3 and checkpoint-6 leaves it."""
    later = {"checkpoint-6", "final_model", "memory", "summary.json"}  # not copied: a small disk holds the rest
    shutil.copytree(reference, dest, ignore=lambda folder, names: [n for n in names if n in later])
    kept = [line for line in (dest / "metrics.jsonl").read_text().splitlines() if json.loads(line)["step"] <= 3]
    (dest / "metrics.jsonl").write_text("\n".join(kept) + "\n")
    return dest


def assert_continues_reference(run_dir, reference, tolerance=1e-4):
    ref, got = losses(reference), losses(run_dir)
    assert sorted(got) == sorted(ref) == [1, 2, 3, 4, 5, 6]
    assert max(abs(got[s] - ref[s]) for s in ref) < tolerance, (got, ref)
    assert read_json(run_dir / "summary.json")["steps"] == 6


def test_finished_run_rerun_says_complete_and_changes_nothing(reference):
    before = snapshot(reference)
    out = run_app(BASE, reference)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == (f"trl_ds: the run in {reference} is complete (6 steps, trainer.max_steps=6); "
                                  f"nothing to train. Raise trainer.max_steps to continue it, or use a new "
                                  f"hydra.run.dir for another run.")
    assert snapshot(reference) == before


def test_a_copied_finished_run_names_its_own_folder(reference, tmp_path):
    """cp -r of a finished run dir (#41): the rerun there, its summary.json and `trl-ds watch` name the copy."""
    run_dir = tmp_path / "copy"
    shutil.copytree(reference, run_dir, ignore=shutil.ignore_patterns("trainer", "final_model"))
    out = run_app(BASE, run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"trl_ds: the run in {run_dir} is complete (6 steps")
    assert read_json(run_dir / "summary.json")["run_dir"] == str(run_dir)
    assert read_json(reference / "summary.json")["run_dir"] == str(reference)
    watched = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert watched.returncode == 0 and f"  run dir        {run_dir}\n" in watched.stdout, watched.stdout


def test_resume_never_over_a_history_is_refused(reference):
    before = snapshot(reference)
    out = run_app([*BASE, "resume=never"], reference)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"trl_ds: resume=never, but hydra.run.dir={reference} already holds a run's history (checkpoint-3, "
        f"checkpoint-6, metrics.jsonl); a run dir holds one run. Use resume=auto to continue that run, or a new "
        f"hydra.run.dir to start over.")
    assert snapshot(reference) == before


@pytest.fixture(scope="module")
def continued(reference, tmp_path_factory):
    """(a copy of the reference continued to trainer.max_steps=9, its launch, what lay beside the reference before)."""
    run_dir = tmp_path_factory.mktemp("safety") / "longer"
    shutil.copytree(reference, run_dir)
    outside = snapshot(reference.parent)
    return run_dir, run_app(["trainer.max_steps=9", *BASE[1:]], run_dir), outside


def test_raised_max_steps_continues_to_the_new_max(reference, continued):
    run_dir, out, outside = continued
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"trl_ds: resuming from {run_dir}/trainer/checkpoint-6\n" in out.stderr
    got, ref = losses(run_dir), losses(reference)
    assert sorted(got) == list(range(1, 10)) and all(got[s] == ref[s] for s in ref)  # steps 1-6 untouched
    assert read_json(run_dir / "summary.json")["steps"] == 9
    assert complete_steps(run_dir) == [6, 9]  # keep_last=2
    assert snapshot(reference.parent) == outside


def test_copied_run_dir_with_a_damaged_checkpoint_resumes_in_the_copy(reference, tmp_path):
    """`bash <copy>/launch.sh 0` from elsewhere: the copy's newest checkpoint has a truncated optimizer shard."""
    run_dir = killed_copy(reference, tmp_path / "copy")
    shutil.copytree(reference / "trainer" / "checkpoint-6", run_dir / "trainer" / "checkpoint-6")
    shard = run_dir / "trainer" / "checkpoint-6" / "global_step6" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    outside = snapshot(tmp_path.parent, skip=run_dir) | snapshot(reference.parent)
    out = subprocess.run(["bash", str(run_dir / "launch.sh"), "0"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=900, env={**os.environ, "PYTHONPATH": str(REPO),  # as in the venv's shell:
                                           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr[-3000:]
    rel = shard.relative_to(run_dir / "trainer" / "checkpoint-6")
    damaged = [p.name for p in (run_dir / "trainer").glob("checkpoint-6.damaged-*")]
    assert len(damaged) == 1
    rank0 = newest(run_dir.glob("logs/node_0/*/attempt_0/0/stdout.log")).read_text()  # torchrun --redirects
    assert (f"trl_ds: checkpoint-6 fails verification ({rel} has {size // 2} bytes, its marker says {size}), set aside "
            f"as {damaged[0]}; resuming from {run_dir}/trainer/checkpoint-3\n") in rank0
    assert_continues_reference(run_dir, reference)
    assert complete_steps(run_dir) == [3, 6]
    assert snapshot(tmp_path.parent, skip=run_dir) | snapshot(reference.parent) == outside


# ZeRO-3 on 3 ranks in sub-groups of 14,492 elements: ten per rank of the tiny model's 434,752.
ZERO3 = ["cluster.gpus_per_node=3", "zero=stage3", "zero.sub_group_size=14492"]
# 2 -> 1 ranks at ZeRO-2, and 2 -> 3 ranks with ZeRO-2 -> ZeRO-3 in one launch: a world change and a stage change each
# make a checkpoint another shape (told apart in tests/unit/rundir/test_nothing_lost_rules.py), and this launch converts
# and loads it into a ZeRO-3 engine of another world size. ZeRO-2 -> ZeRO-3 on the same 2 ranks is converted and
# trained in test_nothing_lost.py::test_a_killed_conversion_to_zero3_is_redone_from_scratch.
SHAPES = [(["cluster.gpus_per_node=1"], 1, 2), (ZERO3, 3, 3)]


@pytest.fixture(scope="module")
def resumed(reference, tmp_path_factory):
    """Each shape's relaunch of the killed reference: (run dir, its launch, what lay beside the reference before);
    made once, so the ZeRO-3 one is resumed again with other sub-groups below."""
    runs = {}

    def run(change):
        key = " ".join(change)
        if key not in runs:
            run_dir = killed_copy(reference, tmp_path_factory.mktemp("shape") / "run")
            outside = snapshot(reference.parent)
            runs[key] = run_dir, run_app([*BASE, *change], run_dir), outside
        return runs[key]
    return run


@pytest.mark.parametrize("change, world, stage", SHAPES)
def test_resume_on_another_cluster_shape_continues_the_run(change, world, stage, reference, resumed):
    from trl_ds.rundir.universal import ensure_universal

    run_dir, out, outside = resumed(change)
    assert out.returncode == 0, out.stderr[-3000:]
    checkpoint = run_dir / "trainer" / "checkpoint-3"
    assert (f"trl_ds: {checkpoint} was written by world size 2 with ZeRO stage 2; this launch has world size {world} "
            f"with ZeRO stage {stage}: converted it to DeepSpeed's universal format in {checkpoint}/"
            f"global_step3_universal; resuming from it\n") in out.stderr
    assert_continues_reference(run_dir, reference)
    assert read_json(run_dir / "summary.json")["world_size"] == world
    marker = checkpoint / "global_step3_universal" / "trl_ds_universal_complete.json"
    stamp = marker.stat().st_mtime_ns
    assert ensure_universal(str(checkpoint)) == (str(checkpoint / "global_step3_universal"), False)  # converted once
    assert marker.stat().st_mtime_ns == stamp
    assert snapshot(reference.parent) == outside


def test_resume_with_other_sub_groups_converts_and_continues(resumed, continued):
    """ZeRO-3 saves its optimizer state per sub-group, so another zero.sub_group_size failed inside DeepSpeed's loader
    ("loaded state dict contains a parameter group that doesn't match"): it is converted like a world change. The
    ZeRO-3 run above (3 ranks, sub-groups of 14,492, checkpoint-6 written at stage 3) continued to step 9 on the same 3
    ranks in sub-groups of 1e9 takes the losses of the ZeRO-2 reference continued to step 9."""
    run_dir = resumed(ZERO3)[0]
    checkpoint = run_dir / "trainer" / "checkpoint-6"
    assert read_json(checkpoint / "trl_ds_complete.json")["sub_group_size"] == 14492
    out = run_app(["trainer.max_steps=9", *BASE[1:], *ZERO3[:2]], run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (f"trl_ds: {checkpoint} was written by world size 3 with ZeRO stage 3 and zero.sub_group_size=14492; this "
            f"launch has world size 3 with ZeRO stage 3 and zero.sub_group_size=1000000000: converted it to "
            f"DeepSpeed's universal format in {checkpoint}/global_step6_universal; resuming from it\n") in out.stderr
    got, ref = losses(run_dir), losses(continued[0])
    assert sorted(got) == sorted(ref) == list(range(1, 10))
    assert max(abs(got[s] - ref[s]) for s in ref) < 1e-4, (got, ref)


def test_a_second_launch_on_a_busy_run_dir_is_refused(tmp_path):
    import psutil

    lock = tmp_path / "launch.lock"
    me = psutil.Process()  # this test process stands for a launcher that is still running
    holder = {"pid": me.pid, "started": me.create_time(), "host": socket.gethostname(), "run_dir": str(tmp_path),
              "since": "2026-12-04 10:00:00 UTC"}
    lock.write_text(json.dumps(holder))
    out = run_app(["dry_run=true"], tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"trl_ds: hydra.run.dir={tmp_path} is in use by another launch (pid {me.pid} on {socket.gethostname()}, since "
        f"2026-12-04 10:00:00 UTC). Wait for it to end or stop it, or use another hydra.run.dir; if that launch is "
        f"gone (another host that trl_ds cannot check), delete {lock}.")
    assert os.listdir(tmp_path) == ["launch.lock"] and json.loads(lock.read_text()) == holder


@pytest.mark.parametrize("whose", ["dead", "copied"])
def test_a_stale_lock_is_taken_over_with_one_line(whose, tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(ended.stdout)  # a launcher that has ended
    run_dir = str(tmp_path) if whose == "dead" else "/elsewhere/original"
    if whose == "copied":
        pid = os.getpid()  # alive, but its lock was copied from another run dir
    lock = tmp_path / "launch.lock"
    lock.write_text(json.dumps({"pid": pid, "started": 1.0, "host": socket.gethostname(), "run_dir": run_dir,
                                "since": "earlier"}))
    out = run_app(["dry_run=true"], tmp_path)
    assert out.returncode == 0, out.stderr
    why = (f"its launcher (pid {pid} on {socket.gethostname()}) has ended" if whose == "dead" else
           f"it was taken by pid {pid} on {socket.gethostname()} for /elsewhere/original (this run dir is a copy)")
    assert f"trl_ds: taking over {lock}: {why}\n" in out.stderr
    assert (tmp_path / "ds_config.json").exists() and not lock.exists()  # it ran, then released the lock


def test_the_lock_is_released_after_a_user_error(tmp_path):
    out = run_app(["checkpoint.keep_last=0"], tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "trl_ds: checkpoint.keep_last=0 must be at least 1."
    assert not tmp_path.exists() or not (tmp_path / "launch.lock").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 30 MiB tmpfs mounted for the test and unmounted after it."""
    yield from tmpfs(tmp_path / "disk", "30m")


@pytest.fixture
def tiny_disk(tmp_path):
    """6 MiB: the tiny model (3.4 MiB) fits, a second copy of it does not."""
    yield from tmpfs(tmp_path / "disk", "6m")


def tmpfs(mount, size):
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a tmpfs needs root and mount(8)")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_read_only_run_dir_is_one_line(small_disk):
    (small_disk / "run").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    out = run_app(["dry_run=true"], small_disk / "run")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[0] == (
        f"trl_ds: launch failed: the disk is read-only writing {small_disk}/run/launch.lock ({small_disk}/run has 30.0 "
        f"MiB free); no complete checkpoint")


def test_disk_full_while_saving_keeps_the_last_checkpoint_and_says_so(small_disk):
    """30 MiB: the tiny model, its data and checkpoint-3 (~17 MiB) fit; checkpoint-6 does not."""
    run_dir = small_disk / "run"
    out = run_app(BASE, run_dir)
    # the launcher itself ends without a traceback (the failing rank's log tail, shown after it, has the rank's)
    assert out.returncode == 1 and "Exception in thread" not in out.stderr and "trl_ds/launch/" not in out.stderr
    assert out.stderr.startswith("trl_ds: warning: checkpoints and the final model need about ") and \
        f"but {run_dir} has 30.0 MiB free." in out.stderr  # said before the launch
    said = re.search(r"trl_ds: run FAILED \(DiskFullError: the disk is full writing (\S+) \((\S+) has ([0-9.]+) MiB "
                     r"free\); complete checkpoints kept: checkpoint-3", out.stdout)
    assert said, out.stdout[-3000:] + out.stderr[-3000:]
    assert said.group(1).startswith(str(run_dir)) and float(said.group(3)) < 1.0  # the path and its free space
    assert complete_steps(run_dir) == [3]  # the incomplete checkpoint-6 was removed, checkpoint-3 kept whole
    assert not (run_dir / "trainer" / "checkpoint-6").exists()
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "failed" and summary["reason"].startswith("DiskFullError: the disk is full writing")


def test_disk_full_while_saving_the_final_model_names_its_folder(tiny_disk):
    run_dir = tiny_disk / "run"
    out = run_app(["trainer.max_steps=2", "checkpoint.every_steps=0"], run_dir)
    assert out.returncode == 1 and "Exception in thread" not in out.stderr and "trl_ds/launch/" not in out.stderr
    said = rf"trl_ds: run FAILED \(DiskFullError: the disk is full writing {re.escape(str(run_dir))}/final_model "
    assert re.search(said + r"\(\S+ has [0-9.]+ MiB free\); no complete checkpoint", out.stdout), out.stdout[-3000:]
    assert read_json(run_dir / "summary.json")["status"] == "failed"


def test_a_load_that_fails_names_the_rank_with_the_cause(reference, tmp_path):
    """A checkpoint marked by an older trl_ds (no file list) with rank 1's optimizer shard truncated: rank 1's load
    fails, rank 0 only loses its peer. The failure names rank 1 and its error, whichever rank exited first."""
    run_dir = killed_copy(reference, tmp_path / "run")
    marker = run_dir / "trainer" / "checkpoint-3" / "trl_ds_complete.json"
    marker.write_text(json.dumps({k: v for k, v in json.loads(marker.read_text()).items() if k != "files"}))
    shard = run_dir / "trainer" / "checkpoint-3" / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    out = run_app(BASE, run_dir)
    assert out.returncode == 1
    log = newest(run_dir.glob("logs/node_0/*/attempt_0/1/stderr.log"))  # the copied run's logs are there too
    said = (r"trl_ds: launch failed: rank 1 \(node 0, local rank 1\) (exited with code 1|failed: RuntimeError: "
            rf"PytorchStreamReader failed reading zip archive.*); its log: {re.escape(str(log))}")
    assert re.search(said, out.stderr), out.stderr[-3000:]
    assert "your checkpoint file is corrupted" in read_json(run_dir / "summary.json")["reason"]
