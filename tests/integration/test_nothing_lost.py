"""Nothing lost, part two (#35), provoked for real on 2 CPU ranks.

One module-scoped history is shared: a run dir named `exp[1] *?é` (brackets, a star, a question mark, a space and
unicode: data, never a pattern) holds a completed 4-step launch, then a continuation to 40 steps whose launcher got
SIGKILL (alone) once checkpoint-6 was marked. Each damage case works on a copy of it (shutil.copytree). A second
launch, from another folder with `trainer.dataset_name=./data.jsonl`, gets SIGKILL to its whole process group.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, read_json, require

from tests.integration.test_resume import complete_steps
from tests.integration.test_run_dir_safety import snapshot
from tests.integration.test_stop import processes_of, wait_for

pytestmark = pytest.mark.integration

ARGS = ["checkpoint.every_steps=2", "batch.global_size=4"]
ENDED_WITHIN_S = 20  # every process of a launch, after SIGKILL to its launcher (0.3-1.8 s measured; 5.5 s for
# a rank stuck in a collective: the lifeline's grace and poll)


def command(run_dir, steps, *extra):
    # Quoted for Hydra's override grammar, which reads [ ] as a list (the launch says so when it is not quoted)
    return [sys.executable, "-m", "trl_ds", f"trainer.max_steps={steps}", *ARGS, *extra, f'hydra.run.dir="{run_dir}"']


def start(cmd, cwd=REPO):
    # A session of its own, as `setsid python -m trl_ds ... &` or a batch system's job step: killpg reaches the
    # launcher and what shares its group (bash execs torchrun), never this test.
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def kill_when(proc, run_dir, ready, group: bool) -> float:
    """SIGKILL the launcher (or its group) once ready(); seconds until no process of the launch is left."""
    wait_for(lambda: ready() or proc.poll() is not None, 300, "the moment to kill")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert len([pid for pid in processes_of(run_dir) if pid != proc.pid]) >= 3  # torchrun and two ranks
    killed_at = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, signal.SIGKILL)
    proc.communicate()
    wait_for(lambda: not processes_of(run_dir), ENDED_WITHIN_S, "torchrun and both ranks ended")
    return time.monotonic() - killed_at


def rows(run_dir, superseded=False):
    with open(run_dir / "metrics.jsonl") as f:
        found = [json.loads(line) for line in f]
    return [r for r in found if superseded or not r.get("superseded")]


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lost") / "exp[1] *?é"
    first = subprocess.run(command(run_dir, 4), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    proc = start(command(run_dir, 40))
    ended_s = kill_when(proc, run_dir, lambda: 6 in complete_steps(run_dir), group=False)
    return run_dir, ended_s


def test_sigkill_to_the_launcher_alone_ends_its_ranks(killed):
    run_dir, ended_s = killed
    assert ended_s < ENDED_WITHIN_S
    assert read_json(run_dir / "summary.json")["steps"] == 4  # the earlier launch's: nobody wrote over it
    assert (run_dir / "launch.lock").exists()  # left by the killed launcher: stale now that none of its processes is


def test_watch_says_the_latest_launch_ended_without_a_summary(killed):
    run_dir, _ = killed
    out = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == (f"trl_ds watch: the latest launch in {run_dir} ended without writing its summary.json (its "
                          f"launcher was killed?); the summary.json there is an earlier launch's (completed after 4 "
                          f"steps). Logs: {run_dir}/logs; rerun the same command to resume it.\n")


def test_a_lowered_max_steps_is_refused_and_changes_nothing(killed, tmp_path):
    run_dir = tmp_path / "lowered"
    shutil.copytree(killed[0], run_dir)
    newest = max(complete_steps(run_dir))
    before = snapshot(run_dir)
    out = subprocess.run(command(run_dir, 5), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.endswith(
        f"trl_ds: trainer.max_steps=5 is below this run's newest checkpoint ({run_dir}/trainer/checkpoint-{newest}, "
        f"step {newest}): resuming would train past step 5, and keeping checkpoint.keep_last would delete older "
        f"checkpoints. Use trainer.max_steps={newest} or more to continue this run, or a new hydra.run.dir for a run "
        f"of 5 steps.\n")
    after = snapshot(run_dir)
    assert {p: v for p, v in after.items() if not p.endswith("launch.lock")} == \
        {p: v for p, v in before.items() if not p.endswith("launch.lock")}


def test_a_read_only_checkpoint_folder_is_refused_before_launch(killed, tmp_path):
    """A read-only trainer/ (a bind mount remounted read-only) would fail only at the first save, after training."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "a read-only bind mount needs root and mount(8)")
    run_dir = tmp_path / "ro"
    shutil.copytree(killed[0], run_dir)
    trainer = run_dir / "trainer"
    written = (run_dir / "launch.sh").stat().st_mtime_ns
    subprocess.run(["mount", "--bind", str(trainer), str(trainer)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(trainer)], check=True)
        out = subprocess.run(command(run_dir, 40), cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["umount", "-l", str(trainer)], check=True)
    assert out.returncode == 2
    assert out.stderr.endswith(f"trl_ds: {trainer} is not writable, so no checkpoint of this launch could be saved. "
                               f"Make it writable (chmod u+w {trainer}) or use another hydra.run.dir.\n")
    assert (run_dir / "launch.sh").stat().st_mtime_ns == written  # refused before the run dir's files: none spawned


def test_damaged_small_files_are_repaired_and_the_run_goes_on(killed, tmp_path):
    """A 0-byte config.yaml, summary.json and newest checkpoint marker, and metrics.jsonl cut mid-row; report and
    watch read them as they are, then the run resumes on 1 rank (the earlier launches had 2)."""
    run_dir = tmp_path / "damaged[2]"
    shutil.copytree(killed[0], run_dir)
    newest = max(complete_steps(run_dir))
    metrics = run_dir / "metrics.jsonl"
    text = metrics.read_text()
    with open(metrics, "r+b") as f:
        f.truncate(len(text.encode()) - 20)  # the last row cut, as a killed writer leaves it
    for name in ("config.yaml", "summary.json", f"trainer/checkpoint-{newest}/trl_ds_complete.json"):
        open(run_dir / name, "w").close()
    report = subprocess.run([sys.executable, "-m", "trl_ds.cli", "report", str(run_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "Traceback" not in report.stderr + report.stdout, report.stderr[-3000:]
    assert "summary.json unreadable" in report.stdout
    watch = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert (watch.returncode, watch.stderr) == (1, (
        f"trl_ds watch: {run_dir}/summary.json is empty or cut short (a kill while it was written); rerun the same "
        f"command to finish the run and rewrite it. Logs: {run_dir}/logs\n"))
    assert (run_dir / "memory" / "rank_1.json").exists()  # from the 2-rank launches
    out = subprocess.run(command(run_dir, 8, "cluster.gpus_per_node=1"), cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert (f"trl_ds: {run_dir}/config.yaml is empty or cut short (a kill while it was written); this launch's "
            f"config replaces it\n") in out.stderr
    aside = [p.name for p in (run_dir / "trainer").glob(f"checkpoint-{newest}.damaged-*")]
    assert len(aside) == 1
    assert (f"trl_ds: checkpoint-{newest} fails verification (its marker trl_ds_complete.json is empty or cut "
            f"short), set aside as {aside[0]}; resuming from {run_dir}/trainer/checkpoint-{newest - 2}\n") in out.stderr
    kept = rows(run_dir)
    assert [r["step"] for r in kept if "loss" in r] == list(range(1, 9))  # one row per step, every launch
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["steps"], summary["run_dir"]) == ("completed", 8, str(run_dir))
    assert summary["world_size"] == 1 and not (run_dir / "memory" / "rank_1.json").exists()  # no stale rank 1
    losses = [r["loss"] for r in kept if "loss" in r]
    assert summary["mean_loss"] == pytest.approx(sum(losses) / len(losses))  # the whole run, not this launch
    watch = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert watch.returncode == 0 and "after 8 steps" in watch.stdout, watch.stderr
    assert "rank 1:" not in watch.stdout


def test_a_killed_conversion_to_zero3_is_redone_from_scratch(killed, tmp_path):
    run_dir = tmp_path / "z3"
    shutil.copytree(killed[0], run_dir)
    newest = max(complete_steps(run_dir))
    checkpoint = run_dir / "trainer" / f"checkpoint-{newest}"
    partial = checkpoint / f"global_step{newest}_universal.partial"
    proc = start(command(run_dir, newest + 2, "zero=stage3"))
    # killed once ds_to_universal has written into the folder, not before and not after it finished
    wait_for(lambda: (partial.exists() and any(partial.iterdir())) or proc.poll() is not None, 300,
             "the conversion wrote its first file")
    assert proc.poll() is None, "the launch ended before its conversion could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert partial.exists() and not (checkpoint / f"global_step{newest}_universal").exists()
    wait_for(lambda: not processes_of(run_dir), ENDED_WITHIN_S, "the converter ended with its launcher")
    out = subprocess.run(command(run_dir, newest + 2, "zero=stage3"), cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (f"with ZeRO stage 3: converted it to DeepSpeed's universal format in {checkpoint}/global_step{newest}"
            f"_universal; resuming from it\n") in out.stderr
    assert not partial.exists()
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["steps"]) == ("completed", newest + 2)


def test_sigkill_to_the_launchers_group_ends_its_ranks_and_a_relative_dataset_is_the_launch_folders(tmp_path):
    from trl_ds.worker.data import write_tiny_dataset

    data = tmp_path / "user folder"
    write_tiny_dataset(str(data))
    run_dir = tmp_path / "run"
    # from the user's folder, as they type it; PYTHONPATH: the repo, as the venv's editable install gives it
    proc = subprocess.Popen(command(run_dir, 300, "trainer.dataset_name=./train.jsonl"), cwd=data,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    # once a step is logged: the ranks loaded ./train.jsonl and train
    ended_s = kill_when(proc, run_dir, lambda: (run_dir / "metrics.jsonl").exists(), group=True)
    assert ended_s < ENDED_WITHIN_S
    # parsed, not searched: YAML folds a long plain value with spaces onto two lines
    assert yaml.safe_load((run_dir / "trainer.yaml").read_text())["dataset_name"] == f"{data}/train.jsonl"
