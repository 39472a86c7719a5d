"""The host and network preflight, provoked for real on the two test hosts (tests/integration/hosts.py): each failure
is one line naming the node, its host and the fix, exit code 2, and through `python -m trl_ds` nothing is spawned.
"""
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration
PORT = 29517


def deepspeed_args(test_hosts, folder, extra=(), hosts=None):
    hostfile = folder / "hosts.txt"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts or test_hosts.addresses))
    return ["launcher=deepspeed", f"cluster.nodes={len(hosts or test_hosts.addresses)}", "cluster.gpus_per_node=1",
            f"cluster.hostfile={hostfile}", f"cluster.master_addr={test_hosts.addresses[0]}",
            f"cluster.master_port={PORT}", "+cluster.env.GLOO_SOCKET_IFNAME=eth1", *extra]


def doctor(test_hosts, args, env=None):
    cmd = test_hosts.in_node(0, [sys.executable, "-m", "trl_ds.cli.doctor", *args])
    return subprocess.run(cmd, cwd=REPO, env=env or test_hosts.env(PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=300)


def problem_lines(done):
    return [line for line in done.stderr.splitlines() if line.startswith("trl-ds doctor: ")]


def test_ready_hosts_pass(test_hosts, tmp_path):
    done = doctor(test_hosts, deepspeed_args(test_hosts, tmp_path))
    assert (done.returncode, done.stdout.strip()) == (0, "trl-ds doctor: 2 node(s), launcher=deepspeed: ready"), \
        done.stderr


def test_wrong_interface_name_is_named_on_every_node(test_hosts, tmp_path):
    done = doctor(test_hosts, deepspeed_args(test_hosts, tmp_path, ["+cluster.env.NCCL_SOCKET_IFNAME=ib0"]))
    assert done.returncode == 2
    assert problem_lines(done) == [
        f"trl-ds doctor: node {n} ({addr}): no network interface ib0 (from NCCL_SOCKET_IFNAME=ib0); the node has "
        f"lo, eth1. Set +cluster.env.NCCL_SOCKET_IFNAME=NAME to the interface on the nodes' shared network."
        for n, addr in enumerate(test_hosts.addresses)]


def test_busy_master_port_on_node_0(test_hosts, tmp_path):
    # A listener on node 0's port, inside node 0's namespace (what an earlier run left behind would hold).
    holder = subprocess.Popen(test_hosts.in_node(0, [sys.executable, "-c", (
        f"import socket, sys, time; s = socket.socket(); s.bind(('0.0.0.0', {PORT})); s.listen(); "
        f"print('up', flush=True); time.sleep(300)")]), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        done = doctor(test_hosts, deepspeed_args(test_hosts, tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2
    assert problem_lines(done) == [
        f"trl-ds doctor: node 0 (10.88.0.1): cluster.master_port={PORT} is in use there, so the rendezvous cannot "
        f"listen on it. Pick a free port, e.g. cluster.master_port={PORT + 1}."]


def test_unreachable_host_and_master_address(test_hosts, tmp_path):
    # 10.88.0.3: on the nodes' subnet, but no host answers there; 10.99.0.1: no route from either node.
    done = doctor(test_hosts, deepspeed_args(test_hosts, tmp_path, ["cluster.master_addr=10.99.0.1"],
                                             hosts=["10.88.0.1", "10.88.0.3"]))
    assert done.returncode == 2
    lines = problem_lines(done)
    assert len(lines) == 2, lines
    assert lines[0].startswith("trl-ds doctor: node 1 (10.88.0.3): `ssh -o BatchMode=yes 10.88.0.3 true` fails (")
    assert lines[0].endswith("Set up passwordless ssh from this node (ssh-copy-id 10.88.0.3), or start each node "
                             "yourself with launcher.no_ssh=true.")
    assert lines[1] == ("trl-ds doctor: node 0 (10.88.0.1): cluster.master_addr=10.99.0.1 (10.99.0.1) is not "
                        "reachable from there (Network is unreachable). Set cluster.master_addr to node 0's address "
                        "on the network the nodes share.")


def test_version_mismatch_on_one_node(test_hosts, tmp_path):
    """Node 1's Python sees another trl (a dist-info first on its path), as on a node set up apart."""
    site = tmp_path / "node1_site" / "trl-9.9.9.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 9.9.9\n")
    node1_python = tmp_path / "node1_python"
    node1_python.write_text(f'#!/bin/sh\nPYTHONPATH={site.parent}:$PYTHONPATH exec {sys.executable} "$@"\n')
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!{sys.executable}\nimport os, sys\nargs = sys.argv[1:]\n"
                       f"if '10.88.0.2' in args:\n    args[-1] = args[-1].replace({sys.executable!r}, "
                       f"{str(node1_python)!r})\nos.execv({str(test_hosts.bin_dir / 'ssh')!r}, ['ssh'] + args)\n")
    for script in (node1_python, wrapper):
        script.chmod(0o755)
    env = test_hosts.env(PYTHONPATH=str(REPO))
    env["PATH"] = f"{wrapper.parent}{os.pathsep}{env['PATH']}"
    done = doctor(test_hosts, deepspeed_args(test_hosts, tmp_path), env=env)
    from importlib.metadata import version

    assert done.returncode == 2
    assert problem_lines(done) == [
        f"trl-ds doctor: node 1 (10.88.0.2) has trl 9.9.9 where node 0 (10.88.0.1) has trl {version('trl')}. Install "
        f"the same versions on every node (pip install trl=={version('trl')} there)."]


def test_launch_refuses_before_spawning(test_hosts, tmp_path):
    """The same checks in front of a launch: exit 2, the problem, no launcher or rank started (no logs/)."""
    run_dir = tmp_path / "run"
    args = deepspeed_args(test_hosts, tmp_path, ["++cluster.env.GLOO_SOCKET_IFNAME=eth9"])
    cmd = test_hosts.in_node(0, [sys.executable, "-m", "trl_ds", *args, f"hydra.run.dir={run_dir}"])
    done = subprocess.run(cmd, cwd=REPO, env=test_hosts.env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert "trl_ds: 2 problems in the config:" in done.stderr
    for n, addr in enumerate(test_hosts.addresses):
        assert (f"node {n} ({addr}): no network interface eth9 (from GLOO_SOCKET_IFNAME=eth9); the node has lo, "
                f"eth1.") in done.stderr
    assert not (run_dir / "logs").exists()


def test_small_dev_shm_on_node_1(test_hosts, tmp_path):
    """Node 1 with a 64 MiB /dev/shm (a container's default), mounted for the doctor's process only (its own mount
    namespace); torchrun: each node checks itself, so node 1 runs its doctor there."""
    args = ["cluster.nodes=2", "cluster.gpus_per_node=1", "cluster.node_rank=1",
            f"cluster.master_addr={test_hosts.addresses[0]}", f"cluster.master_port={PORT}"]
    script = ('mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -m trl_ds.cli.doctor "$@"')
    cmd = test_hosts.in_node(1, ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                 sys.executable, *args])
    done = subprocess.run(cmd, cwd=REPO, env=test_hosts.env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    # 64 MiB = 0.06 GiB; 256 MiB per rank = 0.25 GiB.
    assert problem_lines(done) == [
        f"trl-ds doctor: node 1 ({socket.gethostname()}): /dev/shm has 0.06 GiB free; 1 rank(s) need 0.25 GiB. "
        f"Enlarge it (docker run --shm-size=1g, or mount -o remount,size=1G /dev/shm)."]
    assert os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize > 64 * 2 ** 20  # this machine's untouched
