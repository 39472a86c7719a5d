"""SLURM for real: a 2-node cluster on this machine (scripts/slurm_cluster.sh: munged, slurmctld, two slurmd on
loopback), a job submitted by `python -m trl_ds launcher=slurm`, and torchrun under an allocation taking its node
rank and main node from SLURM. Each job trains the tiny model across both SLURM nodes, 1 CPU rank each."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, read_json, require
from tests.integration.test_multinode import free_port, losses, reference_run, tiny_model_dir
from tests.integration.user_train import user_train_py

pytestmark = pytest.mark.integration
JOB_TIMEOUT_S = 600
# Hydra's quoted-string grammar carries these; the job name and run dir must reach SLURM and bash as data.
HOSTILE = 'tiny run; $(touch pwned) "q" `touch pwned2`'


def wait_for_job(job_id: str, env: dict) -> dict:
    """Poll until the job leaves the queue; then its record (JobState, JobName, ...) from scontrol."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job_id], env=env, capture_output=True, text=True)
        if queued.returncode == 0 and not queued.stdout.strip():
            break
        time.sleep(0.5)  # squeue is cheap; a 2 s poll cost each job ~1 s on average
    else:
        subprocess.run(["scancel", job_id], env=env)
        pytest.fail(f"SLURM job {job_id} still queued or running after {JOB_TIMEOUT_S} s")
    record = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return {"JobState": re.search(r"JobState=(\S+)", record).group(1),
            "JobName": re.search(r"JobName=(.*)$", record, re.M).group(1)}


def trl_ds(args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "trl_ds", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout)


def test_submitted_job_trains_across_both_nodes(slurm_env, tmp_path_factory, tmp_path):
    """A user's own train.py (tests/integration/user_train.py), submitted: sbatch.sh and launch.sh are the worker's but
    for the module each rank runs, and the script runs from the run dir's copy, which every node reads. The worker's
    own submitted jobs: test_requeued_job_resumes_from_its_checkpoint, test_a_rank_that_dies_ends_the_job_naming_it."""
    reference = reference_run(tmp_path_factory)  # the worker's: the script's losses equal it (test_user_script.py)
    run_dir = tmp_path / f"run dir {HOSTILE}"
    model = tiny_model_dir(tmp_path_factory)
    script = user_train_py(tmp_path_factory)
    out = trl_ds(["launcher=slurm", "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.master_port={free_port()}",
                  f"model.name_or_path={model}", f"script={script}", f"script_args=[--model,{model}]",
                  f"launcher.slurm.job_name='{HOSTILE}'", f"hydra.run.dir='{run_dir}'"], slurm_env)
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = re.search(r"submitted SLURM job (\d+)", out.stdout).group(1)
    assert f"job logs     {run_dir}/slurm-{job_id}.out, {run_dir}/slurm-{job_id}.err" in out.stdout
    job = wait_for_job(job_id, slurm_env)
    err_log = run_dir / f"slurm-{job_id}.err"
    assert job == {"JobState": "COMPLETED", "JobName": HOSTILE}, err_log.read_text()[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["world_size"], summary["script"]) == ("completed", 2, str(script))
    assert losses(run_dir) == pytest.approx(reference["losses"], abs=1e-6)
    assert (run_dir / "trainer" / "my_steps.txt").read_text() == str(len(reference["losses"]))  # the script's callback
    for node in (0, 1):  # srun ran launch.sh on each SLURM node, which took its rank from $SLURM_NODEID
        assert list((run_dir / "logs" / f"node_{node}").glob("*/attempt_0/0/stderr.log"))
        assert read_json(run_dir / "memory" / f"rank_{node}.json")["model_states"]  # one rank per node
    assert (run_dir / f"slurm-{job_id}.out").exists()
    assert not list(tmp_path.rglob("pwned*")) and not list(REPO.glob("pwned*"))


def test_torchrun_under_an_allocation_takes_rank_and_main_node_from_slurm(slurm_env, tmp_path_factory, tmp_path):
    """`srun python -m trl_ds ...` on each node of an allocation: no node_rank or master_addr given."""
    reference = reference_run(tmp_path_factory)
    run_dir = tmp_path / "run"
    app = [sys.executable, "-m", "trl_ds", "cluster.nodes=2", "cluster.gpus_per_node=1",
           "cluster.master_addr=unused-outside-slurm", f"cluster.master_port={free_port()}",
           f"model.name_or_path={tiny_model_dir(tmp_path_factory)}", f"hydra.run.dir={run_dir}"]
    wrap = f"srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {shlex.join(app)}"
    submitted = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--chdir={REPO}",
                                f"--output={tmp_path}/alloc-%j.out", "--wrap", wrap],
                               env={**os.environ, **slurm_env}, capture_output=True, text=True)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    job = wait_for_job(job_id, slurm_env)
    output = (tmp_path / f"alloc-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", output[-3000:]
    assert "trl_ds: node 1 done" in output and "trl_ds: run completed" in output
    assert losses(run_dir) == pytest.approx(reference["losses"], abs=1e-6)


def test_a_rank_that_dies_ends_the_job_naming_it(slurm_env, tmp_path_factory, tmp_path):
    """Node 1's rank crashes at start-up; srun --kill-on-bad-exit ends node 0 too, instead of its rank waiting in the
    process group for 30 minutes, and the job's error log names the rank."""
    broken = tmp_path / "broken_site"
    broken.mkdir()
    (broken / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if 'LOCAL_RANK' in os.environ and os.environ.get('SLURM_NODEID') == '1':\n"
        "    sys.stderr.write('simulated: node 1 cannot start its rank\\n'); sys.stderr.flush(); os._exit(3)\n")
    run_dir = tmp_path / "run"
    out = trl_ds(["launcher=slurm", "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.master_port={free_port()}",
                  f"model.name_or_path={tiny_model_dir(tmp_path_factory)}", f"hydra.run.dir={run_dir}"],
                 {**slurm_env, "PYTHONPATH": str(broken)})
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = re.search(r"submitted SLURM job (\d+)", out.stdout).group(1)
    started = time.monotonic()
    job = wait_for_job(job_id, slurm_env)
    assert job["JobState"] == "FAILED"
    assert time.monotonic() - started < 240
    errors = (run_dir / f"slurm-{job_id}.err").read_text()
    assert re.search(r"rank\s*: 1 \(local_rank: 0\)\s*exitcode\s*: 3", errors), errors[-3000:]
    rank_log = next((run_dir / "logs" / "node_1").glob("*/attempt_0/0/stderr.log"))
    assert "simulated: node 1 cannot start its rank" in rank_log.read_text()
    assert not (run_dir / "summary.json").exists()
    # trl-ds watch of the ended job names the rank from every node's torchrun report in the job's error file (#41)
    watched = subprocess.run([sys.executable, "-m", "trl_ds.cli.watch", str(run_dir)], cwd=REPO, capture_output=True,
                             text=True, env={**os.environ, **slurm_env}, timeout=120)
    assert watched.returncode == 1
    assert watched.stderr.startswith(f"trl_ds watch: SLURM job {job_id} failed: rank 1 (node 1, local rank 0) exited "
                                     f"with code 3; its log: {rank_log}"), watched.stderr


def test_requeued_job_resumes_from_its_checkpoint(slurm_env, tmp_path):
    """`scontrol requeue` (what preemption does) kills the running job and queues it again; sbatch.sh has --requeue
    and the second attempt resumes from the newest complete checkpoint instead of starting over."""
    from tests.integration.test_resume import SLOW, complete_steps

    run_dir = tmp_path / "run"
    out = trl_ds(["launcher=slurm", "cluster.nodes=2", "cluster.gpus_per_node=1", f"cluster.master_port={free_port()}",
                  "trainer.max_steps=30", "checkpoint.every_steps=10", *SLOW, f"hydra.run.dir={run_dir}"], slurm_env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "#SBATCH --requeue" in (run_dir / "sbatch.sh").read_text()
    job_id = re.search(r"submitted SLURM job (\d+)", out.stdout).group(1)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not any(step >= 10 for step in complete_steps(run_dir)):
        assert time.monotonic() < deadline, "no checkpoint-10 in time"
        time.sleep(0.2)
    env = {**os.environ, **slurm_env}
    requeued = subprocess.run(["scontrol", "requeue", job_id], env=env, capture_output=True, text=True)
    assert requeued.returncode == 0, requeued.stderr
    start_requeued_job_now(job_id, env)
    job = wait_for_job(job_id, slurm_env)
    assert job["JobState"] == "COMPLETED", (run_dir / f"slurm-{job_id}.err").read_text()[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert (summary["status"], summary["steps"]) == ("completed", 30)
    rows = map(__import__("json").loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    steps = [row["step"] for row in rows if "loss" in row]  # training steps, not the end-of-training summary row
    attempts = [p for p in (run_dir / "logs" / "node_0").iterdir() if p.is_dir()]  # beside them: the joined file
    assert len(attempts) == 2  # torchrun's log dir per launch: requeued once
    assert steps.count(1) == 1 and set(steps) == set(range(1, 31))  # the second attempt resumed, not started over
    # It resumed from checkpoint 10 or later. When the requeue lands before step 11 is logged, the resumed attempt
    # continues at 11 and no step repeats: then there is no restart row at all.
    assert all(b > 10 for a, b in zip(steps, steps[1:]) if b <= a)


def start_requeued_job_now(job_id, env):
    """slurmctld holds a requeued job back (BeginTime two minutes ahead) so its nodes can be cleaned; once it is
    pending again, let it start at once, as an administrator would. What is under test is the resume, not the hold."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=env, capture_output=True, text=True)
        if state.stdout.strip() == "PENDING":
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, capture_output=True)
            return
        time.sleep(0.5)


README_SLURM = ["launcher=slurm", "cluster=2x8", "model=llama3-8b", "zero=stage3", "launcher.slurm.partition=gpu",
                "launcher.slurm.time=04:00:00"]


def test_readme_slurm_command_writes_the_job_on_a_machine_without_gpus(tmp_path):
    """A login node: no GPU here, and no SLURM answering either (the cluster is reached later, from elsewhere)."""
    require(not shutil.which("nvidia-smi"), "this test stands for a login node without GPUs")
    started = time.monotonic()
    out = trl_ds([*README_SLURM, "launcher.slurm.submit=false", f"hydra.run.dir={tmp_path}"],
                 {"SLURM_CONF": str(tmp_path / "no-such-slurm.conf")})
    assert out.returncode == 0, out.stderr
    # sinfo is not asked without a config: it would retry for 60 s (gpu_count.py stopped it at 10) before failing
    assert time.monotonic() - started < 5
    assert f"wrote {tmp_path}/sbatch.sh (launcher.slurm.submit=false)" in out.stdout
    assert "#SBATCH --gpus-per-node=8" in (tmp_path / "sbatch.sh").read_text()


def test_partition_gres_is_compared_with_gpus_per_node(slurm_env, tmp_path):
    """SLURM answers: partition gpu has GRES gpu:8 (sinfo), so 8 per node is written and 16 is refused by name."""
    fits = trl_ds([*README_SLURM, "launcher.slurm.submit=false", f"hydra.run.dir={tmp_path / 'fits'}"], slurm_env)
    assert fits.returncode == 0, fits.stderr
    too_many = trl_ds([*README_SLURM, "cluster.gpus_per_node=16", "launcher.slurm.submit=false",
                       f"hydra.run.dir={tmp_path / 'too_many'}"], slurm_env)
    assert too_many.returncode == 2
    assert too_many.stderr == (
        "trl_ds: launcher.slurm.partition=gpu: the nodes of partition gpu have GRES gpu:8 (sinfo), so at most 8 GPU(s) "
        "per node, but cluster.gpus_per_node=16. Set cluster.gpus_per_node=8, or choose a partition whose nodes have "
        "16 GPUs.\n")
    assert not (tmp_path / "too_many").exists()


def test_a_container_image_without_pyxis_is_refused_naming_the_plugin(slurm_env, tmp_path):
    """This cluster's srun has no pyxis (no --container-image in srun --help): refused before anything is written."""
    image = "launcher.slurm.container_image=/images/trl.sqsh"
    out = trl_ds([*README_SLURM, image, f"hydra.run.dir={tmp_path / 'run'}"], slurm_env)
    assert out.returncode == 2
    assert out.stderr == (
        "trl_ds: launcher.slurm.container_image=/images/trl.sqsh needs the pyxis SPANK plugin, which srun here does "
        "not have (srun --help lists no --container-image). Install pyxis and enroot on the cluster, or drop "
        "launcher.slurm.container_image.\n")
    assert not (tmp_path / "run").exists()


def test_job_on_nodes_without_usable_gpus_ends_at_once_with_one_line(slurm_env, tmp_path):
    """The README's command, really submitted: SLURM allocates gpu:8 on each node, whose device files are empty (no
    GPU to use), and each node's launch.sh ends the job before torchrun starts, saying so in one line."""
    require(not shutil.which("nvidia-smi"), "the nodes must have no usable GPU")
    out = trl_ds([*README_SLURM, f"hydra.run.dir={tmp_path}"], slurm_env)
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = re.search(r"submitted SLURM job (\d+)", out.stdout).group(1)
    started = time.monotonic()
    assert wait_for_job(job_id, slurm_env)["JobState"] == "FAILED"
    assert time.monotonic() - started < 120  # at once: nothing waits for a rendezvous
    errors = (tmp_path / f"slurm-{job_id}.err").read_text()
    ours = [line for line in errors.splitlines() if line.startswith("trl_ds:")]
    # One line per node that got that far: srun --kill-on-bad-exit may end the other node before it prints.
    assert ours and set(ours) <= {f"trl_ds: node {rank} (node{rank + 1}) has 0 usable GPU(s) but the run starts 8 "
                                  f"ranks per node (cluster.gpus_per_node=8). Run on nodes with 8 GPUs, or rebuild "
                                  f"the run dir with cluster=local to train on CPU." for rank in (0, 1)}, errors
    assert "Traceback" not in errors and not (tmp_path / "logs").exists()  # torchrun never started
