"""Multi-host pieces without hosts: the deepspeed runner's .deepspeed_env, per-node rank logs over pdsh, the values
a remote shell would change, reading a remote rank's death from pdsh's output, and the interfaces preflight checks.
(tests/integration/test_hosts_*.py runs them across two real test hosts.)"""
import pytest

from tests.conftest import REPO
from trl_ds.check.validate import validate
from trl_ds.errors import ConfigError
from trl_ds.launch import build_commands, render_launch_files
from trl_ds.launch.failure import NodeView, describe, never_reached
from trl_ds.launch.host_checks import interface_names
from trl_ds.launch.launchers import ssh_hosts

RUN = "/runs/r1"
TWO_HOSTS = ["cluster=2x8", "launcher=deepspeed", "cluster.hostfile=hostfiles/2x8.txt"]


def test_env_file_holds_cluster_and_launcher_env_and_launch_sh_points_deepspeed_at_it(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = compose_cfg(TWO_HOSTS + ["+cluster.env.GLOO_SOCKET_IFNAME=eth1", "+cluster.env.HF_HOME=/shared/hf",
                                   "+launcher.env.HF_HOME=/fast/hf", "+launcher.env.MY_MARKER=a b"])
    files = render_launch_files(cfg, RUN, build_commands(cfg, RUN))
    # launcher.env wins on a clash, as in launch.sh; DeepSpeed splits each line at its first '='.
    assert files[".deepspeed_env"] == "GLOO_SOCKET_IFNAME=eth1\nHF_HOME=/fast/hf\nMY_MARKER=a b\n"
    assert 'export DS_ENV_FILE="$RUN_DIR"/.deepspeed_env\n' in files["launch.sh"]
    # pdsh writes each node's rank in place of %n: one rank-log folder per node
    assert '--enable_each_rank_log "$RUN_DIR"/logs/node_%n ' in files["launch.sh"]


def test_values_a_remote_shell_would_change_are_refused_over_ssh_only(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    bad = ["+launcher.env.A=x$HOME", "+cluster.env.B='say \"hi\"'"]
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(TWO_HOSTS + bad), RUN, launching=False)
    assert [p for p in err.value.problems if "remote shell" in p] == [
        f"launcher.env/cluster.env {name}={val!r}: over ssh the deepspeed runner passes variables through a remote "
        f"shell, which would change a value holding a quote, $, backquote, backslash, line break or surrounding "
        f"spaces. Use a plain value, or launcher.no_ssh=true." for name, val in (("A", "x$HOME"), ("B", 'say "hi"'))]
    validate(compose_cfg(TWO_HOSTS + bad + ["launcher.no_ssh=true"]), RUN, launching=False)  # launch.sh quotes them


def test_ssh_hosts_follow_the_hostfile_after_exclude(compose_cfg, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=1\nb slots=1\nc slots=1\n")
    cfg = compose_cfg(["launcher=deepspeed", "cluster.nodes=2", "cluster.gpus_per_node=1",
                       f"cluster.hostfile={hostfile}", "launcher.exclude=b"])
    assert ssh_hosts(cfg) == ["a", "c"]
    assert ssh_hosts(compose_cfg(["launcher=deepspeed"])) == []  # one node: no ssh


def test_rank_death_on_a_remote_node_names_rank_node_host_and_its_log(tmp_path):
    log = tmp_path / "logs" / "node_1" / "20261204120000_rank3.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback ...\n")
    node = NodeView(rank=0, nodes=2, gpus_per_node=2, log_dir=str(tmp_path / "logs" / "node_0"), endpoint="a:1",
                    rdzv_timeout=60, ssh_hosts=["10.0.0.1", "10.0.0.2"])
    output = ("10.0.0.1: [INFO] [launch.py:245:main] process 7 spawned\n"
              "10.0.0.2: [2026-12-04 12:00:01] [ERROR] [launch.py:259:sigkill_handler] ['/usr/bin/python', '-u', "
              "'-m', 'trl_ds.worker.train', '--local_rank=1', '/runs/r1'] exits with return code = -9\n"
              "pdsh@n0: 10.0.0.2: ssh exited with exit code 247\n")
    failure = describe(output, 1, node)
    # node 1 (second host) x 2 ranks per node + local rank 1 = global rank 3
    assert failure.message == (f"rank 3 (node 1, host 10.0.0.2, local rank 1) exited with signal SIGKILL; its log: "
                               f"{log}")
    assert failure.log == str(log)


def test_interfaces_named_by_socket_ifname_variables():
    env = {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "=ib0,ib1", "TP_SOCKET_IFNAME": "^docker,lo",
           "NCCL_DEBUG": "WARN"}
    assert interface_names(env) == ["eth1", "=ib0", "ib1"]  # an excluding list (^) names none that must exist


@pytest.mark.parametrize("runner, starter, exported", [
    ("openmpi", ["mpirun", "-n", "16", "-hostfile"], ["-x", "GLOO_SOCKET_IFNAME=eth1"]),
    ("mpich", ["mpirun", "-n", "16", "-ppn", "8"], ["-genv", "GLOO_SOCKET_IFNAME=eth1"]),
    ("impi", ["mpirun", "-ppn", "8"], ["-genv", "GLOO_SOCKET_IFNAME", "eth1"]),
    ("slurm", ["srun", "-n", "16"], ["GLOO_SOCKET_IFNAME=eth1"]),
])
def test_other_runners_render_through_deepspeeds_own_runner(compose_cfg, monkeypatch, tmp_path, runner, starter,
                                                            exported):
    """Our launch.sh arguments, parsed by DeepSpeed's runner, give the MPI/srun command that runner would run, with
    the config's environment and the main address (which DeepSpeed's per-node launch would otherwise set)."""
    from deepspeed.launcher import multinode_runner
    from deepspeed.launcher import runner as ds_runner

    monkeypatch.chdir(REPO)
    cfg = compose_cfg(TWO_HOSTS + ["+cluster.env.GLOO_SOCKET_IFNAME=eth1", f"launcher.multinode_runner={runner}",
                                   "launcher.launcher_args='--bind-to none'"])
    cmd = build_commands(cfg, RUN)[0]
    assert cmd[cmd.index("--launcher") + 1] == runner and cmd[cmd.index("--launcher_args") + 1] == "--bind-to none"
    args = ds_runner.parse_args([str(a.shown if hasattr(a, "shown") else a) for a in cmd[1:]])
    pool = ds_runner._parse_hostfile(open(REPO / "hostfiles" / "2x8.txt").read().splitlines())
    active = ds_runner.parse_inclusion_exclusion(pool, "", "")
    classes = {"openmpi": multinode_runner.OpenMPIRunner, "mpich": multinode_runner.MPICHRunner,
               "impi": multinode_runner.IMPIRunner, "slurm": multinode_runner.SlurmRunner}
    backend = classes[runner](args, ds_runner.encode_world_info(active), pool)
    env_file = render_launch_files(cfg, RUN, [cmd])[".deepspeed_env"]
    assert env_file == "GLOO_SOCKET_IFNAME=eth1\nMASTER_ADDR=node-0\nMASTER_PORT=29500\n"
    for line in env_file.splitlines():  # as the runner reads .deepspeed_env
        backend.add_export(*line.split("=", 1))
    full = backend.get_cmd({}, active)
    assert full[:len(starter)] == starter, full
    assert "--bind-to" in full and full[-2:] == ["trl_ds.worker.train", RUN], full
    assert " ".join(exported) in " ".join(full), full


def test_runner_choice_is_checked(compose_cfg, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(TWO_HOSTS + ["launcher.multinode_runner=openmpi", "launcher.exclude=node-1:7"]), RUN,
                 launching=False)
    assert ("launcher.multinode_runner=openmpi cannot pick hosts or slots (DeepSpeed refuses --include/--exclude "
            "with it). List the hosts in cluster.hostfile instead.") in err.value.problems
    with pytest.raises(ConfigError, match=r"launcher.multinode_runner=mpich is how the deepspeed launcher starts "
                                          r"several nodes from node 0"):
        validate(compose_cfg(TWO_HOSTS + ["launcher.multinode_runner=mpich", "launcher.no_ssh=true"]), RUN,
                 launching=False)


def test_a_launch_that_started_every_node_never_advises_starting_nodes_by_hand(tmp_path):
    node = NodeView(rank=0, nodes=2, gpus_per_node=1, log_dir=str(tmp_path / "logs" / "node_0"),
                    endpoint="10.0.0.1:29500", rdzv_timeout=60, ssh_hosts=["10.0.0.1", "10.0.0.2"],
                    starts_every_node=True)
    failure = never_reached(node)
    assert failure.message.startswith(
        f"the ranks did not form the process group at 10.0.0.1:29500 within launcher.rdzv_timeout=60 s, though this "
        f"launch started every node. Read the rank logs under {tmp_path / 'logs'}/ (one folder per node)")
    assert "cluster.node_rank" not in failure.message and "launch.sh" not in failure.message


@pytest.mark.parametrize("report, returncode, said", [
    ("mpirun_rank_killed.txt", 137, "rank 3 (node 1, host vm) exited with signal SIGKILL; its output is in "),
    ("mpirun_rank_exit_code.txt", 7, "rank 3 (node 1, host 10.0.0.2) exited with code 7; its output is in "),
    ("mpirun_report_lost.txt", 137, "a rank that mpirun started failed and mpirun ended the job (exit code 137); "
                                    "Open MPI left out which rank this time; the ranks' output is in "),
])
def test_a_rank_that_mpirun_started_is_named_from_mpiruns_own_report(tmp_path, report, returncode, said):
    """What Open MPI 4.1.4 printed here for 4 ranks (`mpirun -n 4 sh -c ...`, rank 3 killed with SIGKILL or exiting
    with 7, and a run where mpirun lost its report). Its report names the killed rank's host as mpirun knows it ("vm",
    none of the hostfile's: the node follows from the rank, 2 per node) and no host for an exit code, which comes
    from the hostfile then."""
    output = (REPO / "tests" / "data" / report).read_text()
    node = NodeView(rank=0, nodes=2, gpus_per_node=2, log_dir=str(tmp_path / "logs" / "node_0"),
                    endpoint="10.0.0.1:29500", rdzv_timeout=60, starts_every_node=True, hosts=["10.0.0.1", "10.0.0.2"])
    assert describe(output, returncode, node).message == said + f"{tmp_path}/logs/node_0/launcher.log"
