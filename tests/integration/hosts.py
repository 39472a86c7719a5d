"""Two test hosts with their own addresses: network namespaces joined by a veth pair, an sshd in each.

Each namespace's end of the pair is named eth1 (so one config, GLOO_SOCKET_IFNAME=eth1, serves both nodes, as on a
real cluster) and holds 10.88.0.1 or 10.88.0.2. Traffic stays on those addresses and each namespace's loopback.
ssh needs no home folder: the keys live in a temp folder and an `ssh` wrapper early in PATH (which the deepspeed
runner, pdsh and mpirun call) adds them. The namespaces share this machine's files, as cluster nodes share a
filesystem, so a run dir written on node 0 is the one every node reads.
"""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List

INTERFACE = "eth1"
SUBNET = "10.88.0"
SSH_PORT = 22


def missing_components() -> List[str]:
    """What the hosts need and this machine lacks (scripts/setup_test_env.sh installs them)."""
    missing = [f"{tool} (Debian: {package})" for tool, package in (
        ("ip", "iproute2"), ("/usr/sbin/sshd", "openssh-server"), ("ssh-keygen", "openssh-client"),
        ("pdsh", "pdsh"), ("mpirun", "openmpi-bin")) if not shutil.which(tool)]
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    return missing


class TestHosts:
    __test__ = False  # not a test class

    def __init__(self, folder: Path, count: int = 2):
        self.folder = folder
        self.tag = f"t17{os.getpid() % 100000}"
        self.namespaces = [f"{self.tag}n{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self.interface = INTERFACE
        self.sshds: List[subprocess.Popen] = []
        self.bin_dir = folder / "bin"

    # --- set up / tear down -------------------------------------------------------------------------------------

    def start(self) -> "TestHosts":
        try:
            self._make_network()
            self._make_keys()
            for ns, addr in zip(self.namespaces, self.addresses):
                self.sshds.append(self._start_sshd(ns, addr))
            self._wait_for_ssh()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for sshd in self.sshds:
            sshd.terminate()
        for sshd in self.sshds:
            try:
                sshd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sshd.kill()
        for ns in self.namespaces:
            self._kill_inside(ns)  # whatever a test left running in it (ssh sessions, ranks)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def _make_network(self) -> None:
        ends = [f"{self.tag}v{i}" for i in range(len(self.namespaces))]
        _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for ns, end, addr in zip(self.namespaces, ends, self.addresses):
            _ip("netns", "add", ns)
            _ip("link", "set", end, "netns", ns)
            _ip("-n", ns, "link", "set", end, "name", self.interface)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", self.interface)
            _ip("-n", ns, "link", "set", self.interface, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _make_keys(self) -> None:
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ("client_key", "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.folder / name)], check=True)
        shutil.copy(self.folder / "client_key.pub", self.folder / "authorized_keys")
        ssh = self.bin_dir / "ssh"
        ssh.write_text("#!/bin/sh\n"
                       f'exec /usr/bin/ssh -F /dev/null -i {self.folder / "client_key"} -o StrictHostKeyChecking=no '
                       f'-o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR "$@"\n')
        ssh.chmod(0o755)

    def _start_sshd(self, ns: str, addr: str) -> subprocess.Popen:
        os.makedirs("/run/sshd", exist_ok=True)
        config = self.folder / f"sshd_{ns}.conf"
        config.write_text(f"Port {SSH_PORT}\nListenAddress {addr}\nHostKey {self.folder / 'host_key'}\n"
                          f"AuthorizedKeysFile {self.folder / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
                          f"PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                          f"PidFile {self.folder / f'sshd_{ns}.pid'}\n")
        log = open(self.folder / f"sshd_{ns}.log", "w")
        return subprocess.Popen(["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                                stdout=log, stderr=subprocess.STDOUT)

    def _wait_for_ssh(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for addr in self.addresses:
            while True:
                done = subprocess.run(self.in_node(0, ["ssh", addr, "true"]), env=self.env(), capture_output=True,
                                      text=True)
                if done.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ssh {addr} true failed: {done.stderr}")
                time.sleep(0.3)

    def _kill_inside(self, ns: str) -> None:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    # --- for tests ----------------------------------------------------------------------------------------------

    def env(self, **extra: str) -> Dict[str, str]:
        """This environment with the ssh wrapper first on PATH."""
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra}

    def in_node(self, node: int, cmd: List[str]) -> List[str]:
        return ["ip", "netns", "exec", self.namespaces[node], *cmd]

    def write_hostfile(self, path: Path, slots: int = 1) -> Path:
        path.write_text("".join(f"{addr} slots={slots}\n" for addr in self.addresses))
        return path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
