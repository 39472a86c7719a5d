"""Launch builders and scripts, without launching: commands as lists, every script `bash -n` clean, and config
values that stay data when the scripts really run (stub torchrun/srun/scontrol record what they were given)."""
import json
import os
import stat
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.conftest import REPO, run_app
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError
from trl_ds.launch import build_commands, launch_env, render_launch_files, summarizes_here, write_launch_files
from trl_ds.launch.script import format_command
from trl_ds.launch.slurm import sbatch_word
from trl_ds.rundir.deepspeed_config import build_ds_config

HOSTILE_LINE = "a b 'q' \"dq\" ; $(touch pwned) `touch pwned2` \\ $HOME %j #not a comment"
HOSTILE = HOSTILE_LINE + "\nsecond line"
RUN = "/runs/r1"


def with_values(cfg, values):
    """Set values the override grammar cannot spell (quotes, ;, $(...), line breaks), as a YAML file could."""
    for key, val in values.items():
        OmegaConf.update(cfg, key, val, force_add=True)
    return cfg


def commands(compose_cfg, overrides, run_dir=RUN):
    cfg = compose_cfg(overrides)
    return cfg, build_commands(cfg, run_dir)


def test_single_node_torchrun_is_standalone_with_rendezvous_settings(compose_cfg):
    _, cmds = commands(compose_cfg, ["launcher.rdzv_timeout=30", "launcher.max_restarts=2"])
    assert cmds == [["torchrun", "--nnodes", "1", "--nproc_per_node", "2", "--standalone", "--rdzv_conf",
                     "timeout=30", "--max_restarts", "2", "--log_dir", f"{RUN}/logs/node_0", "--redirects", "3",
                     "-m", "trl_ds.worker.train", RUN]]


def test_multi_node_torchrun_has_one_static_command_per_node(compose_cfg):
    _, cmds = commands(compose_cfg, ["cluster=2x8", "cluster.master_addr=node-0", "cluster.master_port=29400"])
    assert len(cmds) == 2
    for rank, cmd in enumerate(cmds):
        assert cmd[cmd.index("--node_rank") + 1] == str(rank)
        assert cmd[cmd.index("--master_port") + 1] == "29400"
        assert cmd[cmd.index("--log_dir") + 1] == f"{RUN}/logs/node_{rank}"
        assert "--rdzv_backend" not in cmd  # static: torchrun honours --node_rank, so node 0 holds rank 0
        assert cmd[-1] == RUN  # the worker's one argument, which start() reads back
    assert format_command(cmds[1]).startswith("torchrun --nnodes 2 --nproc_per_node 8 --node_rank 1 "
                                              "--master_addr node-0 --master_port 29400")


def test_deepspeed_single_node_needs_no_ssh(compose_cfg):
    _, cmds = commands(compose_cfg, ["launcher=deepspeed"])
    assert cmds == [["deepspeed", "--hostfile", f"{RUN}/hostfile", "--master_addr", "127.0.0.1", "--master_port",
                     "29500", "--no_ssh_check", "--enable_each_rank_log", f"{RUN}/logs/node_0", "--module",
                     "trl_ds.worker.train", RUN]]


def test_deepspeed_ssh_mode_is_one_command_on_node_0(compose_cfg):
    _, cmds = commands(compose_cfg, ["cluster=4x8", "launcher=deepspeed", "launcher.exclude=node-3",
                                     "cluster.nodes=3"])
    assert len(cmds) == 1
    assert cmds[0][cmds[0].index("--exclude") + 1] == "node-3" and "--no_ssh" not in cmds[0]


def test_deepspeed_no_ssh_is_one_command_per_node(compose_cfg):
    _, cmds = commands(compose_cfg, ["cluster=2x8", "launcher=deepspeed", "launcher.no_ssh=true"])
    assert [c[c.index("--node_rank") + 1] for c in cmds] == ["0", "1"]
    assert all("--no_ssh" in c for c in cmds)


def test_deepspeed_ssh_mode_runs_on_node_0_only(compose_cfg):
    cfg = compose_cfg(["cluster=2x8", "launcher=deepspeed", "cluster.node_rank=1"])
    with pytest.raises(ConfigError, match=r"cluster.node_rank=1: the deepspeed launcher starts every node from node 0 "
                                          r"over ssh.*launcher.no_ssh=true"):
        validate(cfg, RUN, launching=False)


def test_every_generated_script_passes_bash_n(compose_cfg, tmp_path):
    for overrides in (["cluster=1x8"], ["cluster=2x8"], ["cluster=4x8", "launcher=deepspeed"],
                      ["cluster=2x8", "launcher=deepspeed", "launcher.no_ssh=true"],
                      ["cluster=2x8", "launcher=slurm", "launcher.slurm.partition=gpu", "launcher.slurm.time=1:00:00",
                       "launcher.slurm.extra_sbatch=['--exclusive','--qos=high']"]):
        cfg, cmds = commands(compose_cfg, overrides, str(tmp_path))
        for name, text in render_launch_files(cfg, str(tmp_path), cmds).items():
            if name.endswith(".sh"):
                (tmp_path / name).write_text(text)
                check = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
                assert check.returncode == 0, (overrides, name, check.stderr)


# --- config values stay data: run the scripts for real against stub commands --------------------------------------

def stub_bin(tmp_path):
    """torchrun/deepspeed stubs that record argv and env; srun runs its command once per node; scontrol answers;
    nvidia-smi lists 8 GPUs (launch.sh checks the node's GPUs first: tests/unit/launch/test_gpu_count.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STUB_RECORD"], "a") as f:
    env = {{k: v for k, v in os.environ.items() if k.startswith("T_")}}
    f.write(json.dumps({{"argv": sys.argv, "env": env}}) + "\\n")
"""
    srun = """#!/usr/bin/env bash
while [[ "$1" == --* ]]; do shift; done
for node in 0 1; do SLURM_JOB_NODELIST='gpu-[a-b]' SLURM_NODEID=$node SLURM_NNODES=2 "$@"; done
"""
    scontrol = """#!/usr/bin/env bash
if [ "$2" = hostnames ]; then printf 'gpu-a\\ngpu-b\\n'
else echo "NodeName=$3 Arch=x86_64 NodeAddr=10.9.8.7 CPUTot=8"; fi
"""
    nvidia_smi = "#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: stub\"; done\n"
    for name, text in (("torchrun", record), ("deepspeed", record), ("srun", srun), ("scontrol", scontrol),
                       ("nvidia-smi", nvidia_smi)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_script(script, args, tmp_path, extra_env=None):
    record = tmp_path / "record.jsonl"
    env = {"PATH": f"{stub_bin(tmp_path)}:/usr/bin:/bin", "STUB_RECORD": str(record), **(extra_env or {})}
    out = subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in record.read_text().splitlines()]


def hostile_run_dir(tmp_path, line_break=True):
    run_dir = tmp_path / ("run dir 'q' \"dq\" ; $(touch pwned) `touch pwned2` \\ $HOME %j" + ("\nline2" * line_break))
    run_dir.mkdir()
    return str(run_dir)


def test_launch_sh_keeps_hostile_values_as_data(compose_cfg, tmp_path):
    run_dir = hostile_run_dir(tmp_path)
    cfg = with_values(compose_cfg(["cluster.nodes=2", "cluster.gpus_per_node=1"]),
                      {"launcher.env.T_HOSTILE": HOSTILE, "cluster.env.T_IFNAME": "lo"})
    cmds = build_commands(cfg, run_dir)
    write_launch_files(cfg, run_dir, cmds)
    calls = run_script(os.path.join(run_dir, "launch.sh"), ["1"], tmp_path)
    assert len(calls) == 1
    expected = [a.shown if hasattr(a, "shown") else a for a in cmds[1]]
    assert calls[0]["argv"][1:] == expected[1:]
    assert calls[0]["env"] == {"T_HOSTILE": HOSTILE, "T_IFNAME": "lo"}
    assert not list(tmp_path.rglob("pwned*"))


def test_launch_sh_takes_rank_and_main_node_from_slurm_on_the_node(compose_cfg, tmp_path):
    cfg = compose_cfg(["cluster=2x8", "cluster.master_addr=node-0"])
    write_launch_files(cfg, str(tmp_path), build_commands(cfg, str(tmp_path)))
    slurm = {"SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}
    argv = run_script(tmp_path / "launch.sh", [], tmp_path, slurm)[0]["argv"]
    assert argv[argv.index("--node_rank") + 1] == "1"
    assert argv[argv.index("--master_addr") + 1] == "10.9.8.7"  # NodeAddr of the job's first node


def test_launch_sh_refuses_a_slurm_step_of_the_wrong_size(compose_cfg, tmp_path):
    cfg = compose_cfg(["cluster=2x8"])
    write_launch_files(cfg, str(tmp_path), build_commands(cfg, str(tmp_path)))
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_NODELIST": "a", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}
    out = subprocess.run(["bash", str(tmp_path / "launch.sh")], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert "this SLURM step has 1 node(s); the run was built for cluster.nodes=2" in out.stderr


def test_a_refusal_srun_did_not_forward_reaches_the_job_log_once(compose_cfg, tmp_path):
    """srun --kill-on-bad-exit can end a job before it forwards a failed node's last line (a CI run's slurm-5.err
    held only srun's own lines): launch.sh keeps its refusal beside the log, and sbatch.sh prints what the log lacks."""
    cfg = compose_cfg(["cluster=2x8", "launcher=slurm"])
    write_launch_files(cfg, str(tmp_path), build_commands(cfg, str(tmp_path)))
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "a", "SLURM_NODEID": "0",
           "SLURM_NNODES": "1"}
    out = subprocess.run(["bash", str(tmp_path / "launch.sh")], env=env, capture_output=True, text=True)
    line = "trl_ds: this SLURM step has 1 node(s); the run was built for cluster.nodes=2"
    assert (out.returncode, out.stderr, (tmp_path / "slurm-77.refusals").read_text()) == (2, line + "\n", line + "\n")
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, body in {"srun": "exit 2", "python": "exit 0"}.items():  # srun: the node failed, its line never came
        (fakes / name).write_text(f"#!/bin/sh\n{body}\n")
        (fakes / name).chmod(0o755)
    sbatch = {"PATH": f"{fakes}:/usr/bin:/bin", "SLURM_JOB_ID": "77"}
    for logged, printed in (("", line + "\n"), (line + "\n", "")):  # once: not again when srun did forward it
        (tmp_path / "slurm-77.err").write_text(logged)
        out = subprocess.run(["bash", str(tmp_path / "sbatch.sh")], env=sbatch, capture_output=True, text=True)
        assert (out.returncode, out.stderr) == (2, printed)


def test_sbatch_sh_runs_launch_sh_on_every_node_with_hostile_values(compose_cfg, tmp_path):
    run_dir = hostile_run_dir(tmp_path, line_break=False)  # an #SBATCH line cannot hold one: refused, tested below
    cfg = with_values(compose_cfg(["cluster=2x8", "launcher=slurm"]),
                      {"launcher.slurm.job_name": HOSTILE_LINE, "launcher.env.T_HOSTILE": HOSTILE})
    write_launch_files(cfg, run_dir, build_commands(cfg, run_dir))
    calls = run_script(os.path.join(run_dir, "sbatch.sh"), [], tmp_path)
    assert [c["argv"][c["argv"].index("--node_rank") + 1] for c in calls] == ["0", "1"]
    assert {c["argv"][c["argv"].index("--master_addr") + 1] for c in calls} == {"10.9.8.7"}
    assert all(c["argv"][-1] == run_dir and c["env"]["T_HOSTILE"] == HOSTILE for c in calls)
    assert not list(tmp_path.rglob("pwned*"))


def test_sbatch_header_quotes_values_for_sbatch_and_escapes_percent(compose_cfg):
    cfg = compose_cfg(["cluster=2x8", "launcher=slurm", "launcher.slurm.partition=gpu",
                       "launcher.slurm.account=proj-1", "launcher.slurm.time=2-00:00:00",
                       "launcher.slurm.cpus_per_task=12", "launcher.slurm.extra_sbatch=['--comment=two words']"])
    with_values(cfg, {"launcher.slurm.job_name": 'my "job"; $(x)'})
    text = render_launch_files(cfg, "/runs/100%", build_commands(cfg, "/runs/100%"))["sbatch.sh"]
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header == ['#SBATCH --job-name="my \\"job\\"; $(x)"', "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                      "#SBATCH --gpus-per-node=8", '#SBATCH --cpus-per-task="12"', '#SBATCH --time="2-00:00:00"',
                      '#SBATCH --partition="gpu"', '#SBATCH --account="proj-1"',
                      '#SBATCH --output="/runs/100%%/slurm-%j.out"', '#SBATCH --error="/runs/100%%/slurm-%j.err"',
                      "#SBATCH --requeue", "#SBATCH --open-mode=append", '#SBATCH "--comment=two words"']
    assert "RUN_DIR=/runs/100%\n" in text
    assert sbatch_word('a\\b"c') == '"a\\\\b\\"c"'


def test_cpu_slurm_job_asks_for_no_gpus(compose_cfg):
    cfg = compose_cfg(["cluster.nodes=2", "cluster.gpus_per_node=1", "launcher=slurm"])
    assert "--gpus-per-node" not in render_launch_files(cfg, RUN, build_commands(cfg, RUN))["sbatch.sh"]


@pytest.mark.parametrize("override, message", [
    ("launcher.slurm.time=2h", r"launcher.slurm.time=2h is not a SLURM time. Use MM, HH:MM:SS or D-HH:MM:SS"),
    ({"launcher.slurm.job_name": "a\nb"}, r"launcher.slurm.job_name holds a line break"),
    ("launcher.slurm.extra_sbatch=[exclusive]", r"extra_sbatch\[0\]='exclusive' is not an sbatch option"),
    ("launcher.slurm.cpus_per_task=0", r"launcher.slurm.cpus_per_task=0 must be at least 1"),
    ("cluster.node_rank=1", r"cluster.node_rank=1 has no effect with launcher=slurm"),
])
def test_slurm_config_mistakes(compose_cfg, override, message):
    if isinstance(override, dict):
        cfg = with_values(compose_cfg(["cluster=2x8", "launcher=slurm"]), override)
    else:
        cfg = compose_cfg(["cluster=2x8", "launcher=slurm", override])
    with pytest.raises(ConfigError, match=message):
        validate(cfg, RUN, launching=False)


def test_slurm_run_dir_with_a_line_break_is_refused(compose_cfg):
    cfg = compose_cfg(["cluster=2x8", "launcher=slurm"])
    with pytest.raises(ConfigError, match=r"holds a line break.*hydra.run.dir="):
        build_commands(cfg, "/runs/a\nb")


@pytest.mark.parametrize("overrides, message", [
    (["launcher.rdzv_timeout=0"], r"launcher.rdzv_timeout=0 must be at least 1"),
    (["launcher.max_restarts=-1"], r"launcher.max_restarts=-1 must be 0 or more"),
    (["+launcher.env.BAD-NAME=1"], r"launcher.env has 'BAD-NAME', which is not an environment variable name"),
    ({"cluster.env.1X": "1"}, r"cluster.env has '1X'"),
    ({"cluster.master_addr": "node-0;reboot"}, r"cluster.master_addr='node-0;reboot' is not a host name"),
    (["cluster.hostfile=hostfiles/local.txt"], r"cluster.hostfile=hostfiles/local.txt is read by the deepspeed "
                                               r"launcher only \(launcher=torchrun here\)"),
])
def test_launcher_config_mistakes(compose_cfg, overrides, message):
    cfg = with_values(compose_cfg([]), overrides) if isinstance(overrides, dict) else compose_cfg(overrides)
    with pytest.raises(ConfigError, match=message):
        validate(cfg, RUN, launching=False)


def test_launch_env_merges_cluster_then_launcher(compose_cfg):
    cfg = compose_cfg(["+cluster.env.NCCL_SOCKET_IFNAME=ib0", "+cluster.env.X=1", "+launcher.env.X=2"])
    assert launch_env(cfg) == {"NCCL_SOCKET_IFNAME": "ib0", "X": "2"}


def test_zeropp_keys_follow_the_cluster_and_pass_deepspeeds_parser(compose_cfg, monkeypatch):
    import deepspeed.runtime.config as ds_runtime_config

    cfg = compose_cfg(["cluster=2x8", "zero=stage3", "zero.zeropp=true"])
    batch = validate(cfg, RUN, launching=False)
    ds_config = build_ds_config(cfg, batch, RUN)
    zero = ds_config["zero_optimization"]
    assert (zero["zero_hpz_partition_size"], zero["zero_quantized_weights"], zero["zero_quantized_gradients"]) == (
        8, True, True)
    # DeepSpeed's own checks for 16 ranks, outside a process group (see ENVIRONMENT.md).
    monkeypatch.setattr(ds_runtime_config, "dist", type("Dist", (), {"get_rank": lambda self: 0,
                                                                      "get_world_size": lambda self: 16})())
    parsed = ds_runtime_config.DeepSpeedConfig(ds_config).zero_config
    assert (parsed.zero_hpz_partition_size, parsed.zero_quantized_weights, parsed.zero_quantized_gradients) == (
        8, True, True)
    assert "zero_hpz_partition_size" not in build_ds_config(compose_cfg(["cluster=2x8", "zero=stage3"]), batch,
                                                            RUN)["zero_optimization"]


def test_zeropp_mistakes(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(["zero=stage2", "zero.zeropp=true"]), RUN, launching=False)
    assert err.value.problems[-2:] == [
        "zero.zeropp=true needs zero=stage3 (got zero.stage=2). Use zero=stage3 or zero.zeropp=false.",
        "zero.zeropp=true quantizes with CUDA kernels, and cluster.device=cpu here. Use a GPU cluster such as "
        "cluster=2x8, or zero.zeropp=false."]


def test_summary_is_printed_where_rank_0_runs(compose_cfg, monkeypatch):
    monkeypatch.delenv("SLURM_NODEID", raising=False)
    assert summarizes_here(compose_cfg(["cluster=2x8"]))
    assert not summarizes_here(compose_cfg(["cluster=2x8", "cluster.node_rank=1"]))
    assert not summarizes_here(compose_cfg(["cluster=2x8", "launcher=slurm"]))
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "a,b")
    assert not summarizes_here(compose_cfg(["cluster=2x8"]))  # under an allocation SLURM says which node this is


def test_missing_sbatch_is_a_clear_error_naming_the_script(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"} if not _has_sbatch("/usr/bin:/bin") else {"PATH": str(bin_dir)}
    run_dir = tmp_path / "run"
    out = run_app(["cluster.nodes=2", "cluster.gpus_per_node=1", "launcher=slurm"], run_dir, timeout=120, env=env)
    assert out.returncode == 2, out.stderr
    assert f"sbatch, which is not installed here. The job script is written: {run_dir}/sbatch.sh" in out.stderr
    assert stat.S_IMODE((run_dir / "sbatch.sh").stat().st_mode) & 0o100


def _has_sbatch(path):
    return any(os.access(os.path.join(p, "sbatch"), os.X_OK) for p in path.split(":"))


def test_submit_false_writes_the_script_only(tmp_path):
    out = run_app(["cluster.nodes=2", "cluster.gpus_per_node=1", "launcher=slurm", "launcher.slurm.submit=false"],
                  tmp_path / "run", timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"submit it with: sbatch {tmp_path}/run/sbatch.sh" in out.stdout
    assert not (tmp_path / "run" / "summary.json").exists()


def test_dry_run_prints_every_node_command(tmp_path):
    out = run_app(["cluster=2x8", "dry_run=true"], tmp_path / "run", timeout=120)
    assert out.returncode == 0, out.stderr
    for rank in (0, 1):
        assert f"node {rank}: torchrun --nnodes 2 --nproc_per_node 8 --node_rank {rank} --master_addr node-0 " \
               f"--master_port 29500" in out.stdout


def test_shipped_launcher_presets_compose(compose_cfg):
    for name in ("torchrun", "deepspeed", "slurm"):
        assert compose_cfg([f"launcher={name}"]).launcher.name.value == name
    assert (REPO / "conf" / "launcher" / "slurm.yaml").read_text().startswith("# python -m trl_ds launcher=slurm")
