"""The run dir's small pieces under real faults, without a training run: two launches racing for one stale lock
(real processes released together), a launch whose launcher died while its processes live, metrics.jsonl cut by a
kill, a lowered trainer.max_steps, a run dir name too long for the file system."""
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys

import pytest

from trl_ds.errors import ConfigError
from trl_ds.launch.run_dir_lock import RunDirLock
from trl_ds.rundir.lifeline import LAUNCH_ID
from trl_ds.rundir.metrics import mean_loss, prepare_for_resume, read_rows


def dead_pid() -> int:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(ended.stdout)


def stale_lock(run_dir, launch_id=None) -> dict:
    holder = {"pid": dead_pid(), "started": 1.0, "host": socket.gethostname(), "run_dir": str(run_dir),
              "launch_id": launch_id, "since": "earlier"}
    (run_dir / "launch.lock").write_text(json.dumps(holder))
    return holder


def _race(run_dir, go, done, results):
    go.wait()
    try:
        RunDirLock(str(run_dir)).acquire()
        results.put(("won", os.getpid()))
    except ConfigError as err:
        results.put(("lost", err.problems[0]))
    done.wait()  # the winner lives (holding the lock) until both have tried


def test_two_takeovers_of_one_stale_lock_one_wins_and_the_loser_names_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        run_dir = tmp_path / f"t{trial}"
        run_dir.mkdir()
        stale_lock(run_dir)
        go, done, results = ctx.Event(), ctx.Barrier(2), ctx.Queue()
        racers = [ctx.Process(target=_race, args=(run_dir, go, done, results)) for _ in range(2)]
        for racer in racers:
            racer.start()
        go.set()
        outcomes = sorted(results.get(timeout=30) for _ in racers)
        for racer in racers:
            racer.join(timeout=30)
        assert [o[0] for o in outcomes] == ["lost", "won"], (trial, outcomes)
        winner = outcomes[1][1]
        assert f"(pid {winner} on {socket.gethostname()}, since " in outcomes[0][1], outcomes[0][1]


def test_a_lock_whose_launcher_died_is_held_while_a_process_of_its_launch_lives(tmp_path):
    orphan = subprocess.Popen(["sleep", "60"], env={**os.environ, LAUNCH_ID: "launch-under-test"})
    try:
        holder = stale_lock(tmp_path, "launch-under-test")
        with pytest.raises(ConfigError) as refused:
            RunDirLock(str(tmp_path)).acquire()
        assert refused.value.problems == [
            f"hydra.run.dir={tmp_path} is in use: processes of its launch still run: its launcher (pid "
            f"{holder['pid']} on {socket.gethostname()}) has ended, but 1 of its processes have not (pids "
            f"{orphan.pid}); they end by themselves within seconds of losing their launcher. Wait and rerun, or "
            f"stop them: kill {orphan.pid}."]
    finally:
        orphan.send_signal(signal.SIGKILL)
        orphan.wait()
    lock = RunDirLock(str(tmp_path))
    lock.acquire()  # none of its processes lives now: stale, taken over
    assert json.loads((tmp_path / "launch.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / "launch.lock").exists()


def test_an_empty_lock_is_taken_over_naming_why(tmp_path, capsys):
    (tmp_path / "launch.lock").write_text("")
    os.utime(tmp_path / "launch.lock", (1, 1))  # left long ago (a full disk, an older trl_ds)
    lock = RunDirLock(str(tmp_path))
    lock.acquire()
    assert capsys.readouterr().err == (f"trl_ds: taking over {tmp_path}/launch.lock: it is unreadable (empty or cut "
                                       f"short), so no launch can be named in it\n")
    lock.release()


def test_a_lock_being_written_without_hard_links_is_held(tmp_path, monkeypatch):
    """Where link() fails the lock is created, then written: a racing launch that finds it empty meanwhile is refused
    rather than taking it over."""
    def no_links(*args):
        raise PermissionError(1, "Operation not permitted")  # what a file system without hard links says

    monkeypatch.setattr(os, "link", no_links)
    first = RunDirLock(str(tmp_path))
    first.acquire()  # the create-exclusive path
    assert json.loads((tmp_path / "launch.lock").read_text())["pid"] == os.getpid()
    first.release()
    (tmp_path / "launch.lock").write_text("")  # as another launch's lock between its create and its write
    with pytest.raises(ConfigError) as refused:
        RunDirLock(str(tmp_path)).acquire()
    assert refused.value.problems == [f"hydra.run.dir={tmp_path} is in use: another launch took {tmp_path}/launch.lock "
                                      f"moments ago. Wait for it to end or stop it, or use another hydra.run.dir."]
    assert (tmp_path / "launch.lock").read_text() == ""


def write_rows(path, steps, cut=""):
    with open(path, "w") as f:
        for step in steps:
            f.write(json.dumps({"step": step, "time": 100.0 + step, "loss": float(step)}) + "\n")
        f.write(cut)


def test_a_cut_last_row_is_dropped_and_resumed_steps_are_marked(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_rows(path, range(1, 8), cut='{"step": 8, "time": 10')  # a writer killed mid-row at step 8
    assert prepare_for_resume(str(path), resumed_step=4) == (1, 3)  # checkpoint-4: steps 5-7 are trained again
    lines = path.read_text().splitlines()
    assert len(lines) == 7 and path.read_text().endswith("\n")
    assert [json.loads(line).get("superseded", False) for line in lines] == [False] * 4 + [True] * 3
    with open(path, "a") as f:  # the resumed launch appends steps 5-8 again
        for step in range(5, 9):
            f.write(json.dumps({"step": step, "time": 200.0 + step, "loss": step + 0.5}) + "\n")
    rows = read_rows(str(path))
    assert [r["step"] for r in rows] == list(range(1, 9))  # one row per step
    assert mean_loss(rows) == pytest.approx((1 + 2 + 3 + 4 + 5.5 + 6.5 + 7.5 + 8.5) / 8)
    assert prepare_for_resume(str(path), resumed_step=8) == (0, 0)  # nothing to repair: not rewritten


def test_a_row_appended_onto_a_cut_line_by_an_older_trl_ds_is_recovered(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_rows(path, [1, 2], cut='{"step": 3, "ti' + json.dumps({"step": 3, "time": 1.0, "loss": 3.0}) + "\n")
    assert [r["step"] for r in read_rows(str(path))] == [1, 2, 3]
    prepare_for_resume(str(path), resumed_step=3)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_lowered_max_steps_below_the_newest_checkpoint_is_refused(tmp_path, compose_cfg):
    from trl_ds.check.history import check_history

    for step in (14, 16):
        folder = tmp_path / "trainer" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trl_ds_complete.json").write_text(json.dumps({"step": step, "files": {}}))
    (tmp_path / "trainer" / "checkpoint-18").mkdir()  # no marker: never resumed from
    assert check_history(compose_cfg(["trainer.max_steps=10"]), str(tmp_path)) == [
        f"trainer.max_steps=10 is below this run's newest checkpoint ({tmp_path}/trainer/checkpoint-16, step 16): "
        f"resuming would train past step 10, and keeping checkpoint.keep_last would delete older checkpoints. Use "
        f"trainer.max_steps=16 or more to continue this run, or a new hydra.run.dir for a run of 10 steps."]
    assert check_history(compose_cfg(["trainer.max_steps=16"]), str(tmp_path)) == []


def test_lowered_epochs_ending_before_the_newest_checkpoint_are_refused(tmp_path, compose_cfg):
    """The tiny split is 512 rows; global batch 4 (micro 2 × 2 ranks): 128 optimizer steps per epoch."""
    from trl_ds.check.history import check_history
    from trl_ds.config.batch import resolve_batch

    folder = tmp_path / "trainer" / "checkpoint-16"
    folder.mkdir(parents=True)
    (folder / "trl_ds_complete.json").write_text(json.dumps({"step": 16, "files": {}}))
    batch = resolve_batch(2, 2, None, None)

    def problems(epochs):
        cfg = compose_cfg(["trainer.max_steps=-1", f"trainer.num_train_epochs={epochs}"])
        return check_history(cfg, str(tmp_path), batch)

    assert problems(0.1) == [  # ceil(0.1 × 128) = 13 steps
        f"trainer.num_train_epochs=0.1 is 13 optimizer steps (512 rows: 128 per epoch × 0.1 epochs), which ends "
        f"before this run's newest checkpoint ({tmp_path}/trainer/checkpoint-16, step 16). Use "
        f"trainer.num_train_epochs=0.125 or more to continue this run, or a new hydra.run.dir for a run of 0.1 epochs."]
    assert problems(0.125) == [] and problems(1) == []  # 16 and 128 steps


def test_an_empty_checkpoint_marker_fails_verification(tmp_path):
    from trl_ds.rundir.checkpoint import newest_verified

    for step in (2, 4):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trl_ds_complete.json").write_text(json.dumps({"step": step, "files": {}}) if step == 2 else "")
    assert newest_verified(str(tmp_path)) == (str(tmp_path / "checkpoint-2"), [
        (str(tmp_path / "checkpoint-4"), "its marker trl_ds_complete.json is empty or cut short")])


def test_a_run_dir_name_too_long_is_one_line(tmp_path):
    name = "x" * 300
    out = subprocess.run([sys.executable, "-m", "trl_ds", "dry_run=true", f"hydra.run.dir={tmp_path}/{name}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr == (f"trl_ds: hydra.run.dir has a folder name of 300 bytes ({'x' * 40}...); this file system "
                          f"allows {os.pathconf(tmp_path, 'PC_NAME_MAX')}. Use a shorter name in hydra.run.dir=...\n")
    assert os.listdir(tmp_path) == []


def test_a_run_dir_hydra_would_misread_is_one_line_saying_to_quote_it():
    from trl_ds.cli.run import name_too_long

    assert name_too_long(["hydra.run.dir=/runs/exp[1]"]) == (
        "hydra.run.dir=/runs/exp[1] holds characters Hydra's override grammar reads as syntax ([]{}(),='\") or does "
        "not take unquoted (non-ASCII); quote the path for Hydra: 'hydra.run.dir=\"/runs/exp[1]\"'")
    assert name_too_long(['hydra.run.dir="/runs/exp[1] *?é"', "hydra.run.dir=/runs/a b*?"]) is None
    assert name_too_long(["hydra.run.dir=/runs/a,b"]).startswith("hydra.run.dir=/runs/a,b holds characters")  # a sweep


def test_a_run_dir_hydras_parser_accepts_is_not_refused(tmp_path):
    """Interpolations and backslash escapes are Hydra's own grammar: the app runs with them, as Hydra reads them."""
    import time

    from trl_ds.cli.run import name_too_long

    assert name_too_long(["hydra.run.dir=outputs/${now:%Y-%m-%d}/x", r"hydra.run.dir=/runs/exp\[1\]",
                          r"hydra.sweep.dir=/runs/f\(x\)\,y", "hydra.sweep.subdir=${hydra.job.num}"]) is None
    out = subprocess.run([sys.executable, "-m", "trl_ds", "dry_run=true",
                          f"hydra.run.dir={tmp_path}/${{now:%Y}}/exp\\[1\\]"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / time.strftime("%Y") / "exp[1]" / "config.yaml").is_file()


def test_epoch_mode_continues_when_num_train_epochs_was_raised(tmp_path, compose_cfg):
    from trl_ds.check.history import finished_run

    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "steps": 8}))
    (tmp_path / "config.yaml").write_text("trainer:\n  max_steps: -1\n  num_train_epochs: 1.0\n")
    raised = compose_cfg(["trainer.max_steps=-1", "trainer.num_train_epochs=2"])
    assert finished_run(raised, str(tmp_path)) is None
    same = compose_cfg(["trainer.max_steps=-1", "trainer.num_train_epochs=1"])
    assert finished_run(same, str(tmp_path)) == (
        f"the run in {tmp_path} is complete (8 steps, trainer.num_train_epochs=1.0); nothing to train. Raise "
        f"trainer.num_train_epochs to continue it, or use a new hydra.run.dir for another run.")


def test_resuming_on_fewer_ranks_without_a_global_batch_says_the_batch_changes(tmp_path, compose_cfg):
    from trl_ds.cli.run import batch_change_line
    from trl_ds.config.batch import Batch

    (tmp_path / "trl_ds_complete.json").write_text(json.dumps({"step": 6, "world_size": 2, "files": {}}))
    cfg = compose_cfg(["cluster.gpus_per_node=1"])
    line = batch_change_line(cfg, str(tmp_path), Batch(micro=2, world=1, accumulation=1))
    assert line == (f"trl_ds: warning: batch.global_size is not set, so the global batch follows the world size: 4 "
                    f"samples per step when {tmp_path.name} was written (2 ranks), 2 now (1 rank). Set "
                    f"batch.global_size=4 to keep it.")
    kept = compose_cfg(["cluster.gpus_per_node=1", "batch.global_size=4"])
    assert batch_change_line(kept, str(tmp_path), Batch(micro=2, world=1, accumulation=2)) is None


def test_a_tensor_parallel_resume_compares_whole_worlds(tmp_path, compose_cfg):
    """The marker holds the whole world (2 ranks); at tp.size=2 they were one data-parallel rank."""
    from trl_ds.cli.run import batch_change_line
    from trl_ds.config.batch import Batch

    (tmp_path / "trl_ds_complete.json").write_text(json.dumps({"step": 6, "world_size": 2, "files": {}}))
    same = compose_cfg(["tp=autotp", "tp.size=2", "cluster.gpus_per_node=2"])
    assert batch_change_line(same, str(tmp_path), Batch(micro=4, world=1, accumulation=1)) is None
    wider = compose_cfg(["tp=autotp", "tp.size=2", "cluster.gpus_per_node=4"])  # 2 data-parallel ranks now
    assert batch_change_line(wider, str(tmp_path), Batch(micro=4, world=2, accumulation=1)) == (
        f"trl_ds: warning: batch.global_size is not set, so the global batch follows the world size: 4 samples per "
        f"step when {tmp_path.name} was written (2 ranks), 8 now (4 ranks). Set batch.global_size=4 to keep it.")


def test_the_live_tail_skips_cut_rows_and_follows_a_resumed_launchs_rewrite(tmp_path):
    from trl_ds.launch.progress import MetricsTail

    path = tmp_path / "metrics.jsonl"
    write_rows(path, [1, 2, 3], cut='{"step": 4, "ti')  # a killed writer's cut row, then the next launch's rows
    with open(path, "a") as f:
        f.write(json.dumps({"step": 4, "time": 104.0, "loss": 4.0}) + "\n")
    tail = MetricsTail(str(path))
    assert [r["step"] for r in tail.read()] == [1, 2, 3, 4]  # the glued row recovered, no traceback
    prepare_for_resume(str(path), resumed_step=2)  # a resumed launch rewrites the file (a new inode)
    with open(path, "a") as f:
        f.write(json.dumps({"step": 3, "time": 300.0, "loss": 3.5}) + "\n")
    assert [(r["step"], r["loss"]) for r in tail.read()] == [(3, 3.5)]  # steps 1 and 2 were read before


def test_the_launchers_tail_shows_no_earlier_launchs_rows_after_the_rewrite(tmp_path):
    """The launcher skips the rows there at its start; the resumed ranks then rewrite the file, then append."""
    import time

    from trl_ds.launch.progress import MetricsTail, Progress

    path = tmp_path / "metrics.jsonl"
    write_rows(path, [1, 2, 3])  # times 101..103: a launch long ago, killed after step 3
    tail = MetricsTail(str(path))
    tail.skip_existing()
    prepare_for_resume(str(path), resumed_step=2)  # step 3 is trained again
    now = time.time()
    with open(path, "a") as f:
        for step in (3, 4):
            f.write(json.dumps({"step": step, "time": now + step, "loss": 0.5}) + "\n")
    progress = Progress(total_steps=10)
    progress.add(tail.read())
    assert [step for _, step, _ in progress._window] == [3, 4]
    assert progress.seconds_left == 6.0  # 6 steps left at this launch's 1 s per step


def test_a_summary_of_an_earlier_launch_is_told_apart_by_launch_id(tmp_path):
    from trl_ds.rundir.layout import summary_is_latest

    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "launch_id": "a"}))
    assert summary_is_latest(str(tmp_path))  # no latest_launch: an older trl_ds, or launch.sh run by hand
    (tmp_path / "latest_launch").write_text("a\n")
    assert summary_is_latest(str(tmp_path))
    (tmp_path / "latest_launch").write_text("b\n")  # launch b started its ranks and was killed before a summary
    assert not summary_is_latest(str(tmp_path))
    os.utime(tmp_path / "latest_launch", (1, 1))  # file times do not decide (a cp -r copy reorders them)
    assert not summary_is_latest(str(tmp_path))


def test_a_launch_stopped_while_it_prepares_the_resume_is_the_latest(tmp_path, compose_cfg, monkeypatch):
    """Stopped before its ranks start (ready_resume converts a checkpoint for minutes): its summary.json is the
    latest launch's, not taken for an earlier one's."""
    import time
    import types

    from trl_ds.cli import run
    from trl_ds.launch.run import Stopped
    from trl_ds.launch.summary import record_stopped
    from trl_ds.rundir.layout import summary_is_latest
    from trl_ds.rundir.lifeline import this_launch_id

    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped", "launch_id": "earlier"}))
    (tmp_path / "latest_launch").write_text("earlier\n")

    def stopped(*args):
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(run, "ready_resume", stopped)
    hydra_cfg = types.SimpleNamespace(overrides=types.SimpleNamespace(task=[]))
    with pytest.raises(Stopped) as stop:
        run._launch(compose_cfg(["preflight.hosts=false"]), str(tmp_path), False, hydra_cfg, time.time())
    record_stopped(str(tmp_path), stop.value, 1.0, writes_summary=True)  # as app() does
    assert json.loads((tmp_path / "summary.json").read_text())["launch_id"] == this_launch_id()
    assert summary_is_latest(str(tmp_path))


@pytest.mark.parametrize("saved", ["", "trainer: {max_steps: 3", "- a list\n"])
def test_a_config_yaml_cut_by_a_kill_is_replaced_with_one_line(tmp_path, compose_cfg, capsys, saved):
    from trl_ds.check.reuse import check_run_dir

    (tmp_path / "config.yaml").write_text(saved)
    assert check_run_dir(compose_cfg([]), str(tmp_path)) == []
    assert capsys.readouterr().err == (f"trl_ds: {tmp_path}/config.yaml is empty or cut short (a kill while it was "
                                       f"written); this launch's config replaces it\n")


def test_a_checkpoint_of_other_sub_groups_is_a_shape_change(tmp_path, compose_cfg):
    """ZeRO-3 saves its optimizer state per sub-group, so zero.sub_group_size is part of the checkpoint's shape; below
    stage 3 it partitions nothing, and a marker from before it was recorded is taken to match."""
    from trl_ds.rundir.checkpoint import mark_complete
    from trl_ds.rundir.universal import shape_change, sub_groups

    checkpoint = str(tmp_path / "checkpoint-3")
    os.makedirs(checkpoint)
    mark_complete(checkpoint, 3, 2, 3, 43476)
    assert shape_change(checkpoint, 2, 3, 43476) is None
    assert shape_change(checkpoint, 2, 3, 10 ** 9) == (
        "written by world size 2 with ZeRO stage 3 and zero.sub_group_size=43476; this launch has world size 2 with "
        "ZeRO stage 3 and zero.sub_group_size=1000000000")
    assert shape_change(checkpoint, 2, 2, None) == ("written by world size 2 with ZeRO stage 3; this launch has world "
                                                    "size 2 with ZeRO stage 2")
    mark_complete(checkpoint, 3, 2, 3)  # an older marker: no sub_group_size
    assert shape_change(checkpoint, 2, 3, 10 ** 9) is None
    assert sub_groups(compose_cfg(["zero=stage3", "zero.sub_group_size=5"])) == 5
    assert sub_groups(compose_cfg(["zero=stage2", "zero.sub_group_size=5"])) is None


def test_offload_ratio_may_change_on_resume_other_offload_keys_may_not(tmp_path, compose_cfg):
    from trl_ds.check.reuse import check_run_dir
    from trl_ds.cli.app import build, write_run_dir

    base = ["zero=stage3", "offload=cpu", "zero.sub_group_size=43476"]
    cfg = compose_cfg(base)
    write_run_dir(cfg, build(cfg, str(tmp_path), launching=False))
    assert check_run_dir(compose_cfg([*base, "offload.ratio=0.5"]), str(tmp_path)) == []
    assert "offload.pin_memory: True → False" in check_run_dir(compose_cfg([*base, "offload.pin_memory=false"]),
                                                              str(tmp_path))[0]


def test_sub_groups_sharing_one_adam_step_each_get_their_own():
    """DeepSpeed's ZeRO-3 universal load gives every sub-group one `step` object; torch's AdamW increments it in place,
    so two sub-groups stepped in turn counted 2 steps for one (torch's own AdamW is the oracle: one step is +1)."""
    import torch

    from trl_ds.worker.own_steps import own_steps

    groups = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    adam = torch.optim.AdamW([groups[0]], lr=0.1)
    shared = torch.tensor(3.0)
    for p in groups:
        adam.state[p] = {"step": shared, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}

    def step_each():  # as stage3.py _optimizer_step: one sub-group at a time in the param group
        for p in groups:
            p.grad = torch.ones_like(p)
            adam.param_groups[0]["params"] = [p]
            adam.step()

    step_each()
    assert [float(adam.state[p]["step"]) for p in groups] == [5.0, 5.0]  # the bug: 3 -> 5 in one optimizer step
    shared = torch.tensor(3.0)  # as loaded again
    for p in groups:
        adam.state[p]["step"] = shared

    class Wrapped:  # accelerate's and DeepSpeed's wrappers, each with .optimizer
        optimizer = type("Zero3", (), {"optimizer": adam})()

    assert own_steps(Wrapped()) == 1
    step_each()
    assert [float(adam.state[p]["step"]) for p in groups] == [4.0, 4.0]
