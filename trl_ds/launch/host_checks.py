"""What one node sees of the network and its software, as JSON: run in-process on this node, or on each host over
ssh (`python -m trl_ds.launch.host_checks REQUEST_JSON`) for the launchers that start hosts over ssh. No torch
import: versions come from the installed packages' metadata."""
import errno
import json
import os
import socket
import sys
from importlib import metadata
from typing import Dict, List, Optional

PACKAGES = ("torch", "deepspeed", "transformers", "trl")  # and trl_ds: its git commit
CONNECT_TIMEOUT_S = 3


def probe(request: dict) -> dict:
    """request: master_addr, master_port, interfaces (names to find), check_port (this node hosts the rendezvous),
    versions (false: nothing to compare them with)."""
    addr, port = request["master_addr"], request["master_port"]
    resolved = resolve(addr)
    return {
        "resolved": resolved,
        "reach": reach(resolved, port) if resolved else None,
        "missing_interfaces": [name for name in request["interfaces"] if not has_interface(name)],
        "interfaces": [name for _, name in socket.if_nameindex()],
        "port_busy": port_busy(port) if request.get("check_port") else False,
        "shm_free": shm_free(),
        "versions": versions() if request.get("versions", True) else {},
    }


def resolve(addr: str) -> Optional[str]:
    try:
        return socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, IndexError, UnicodeError):
        return None


def reach(ip: str, port: int) -> Optional[str]:
    """None when the host answered (a refused connection is an answer: nothing listens there before launch)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_TIMEOUT_S)
        try:
            s.connect((ip, port))
            return None
        except ConnectionRefusedError:
            return None
        except socket.timeout:
            return f"no answer within {CONNECT_TIMEOUT_S} s"
        except OSError as err:
            return os.strerror(err.errno) if err.errno else str(err)


def has_interface(name: str) -> bool:
    """NCCL/gloo names: an exact name with a leading '=', else a prefix (NCCL's rule; exact names match too)."""
    names = [n for _, n in socket.if_nameindex()]
    if name.startswith("="):
        return name[1:] in names
    return any(n == name or n.startswith(name) for n in names)


def port_busy(port: int) -> bool:
    """Whether the rendezvous store could not listen on the port (it binds every address, with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return False
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return True
            raise


def shm_free() -> Optional[int]:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def versions() -> Dict[str, Optional[str]]:
    found = {"trl_ds": trl_ds_commit()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def trl_ds_commit() -> Optional[str]:
    """The git commit of the trl_ds source this Python imports (None outside a git checkout)."""
    import subprocess

    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above trl_ds/launch/
    try:
        done = subprocess.run(["git", "-C", source, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def interface_names(env: Dict[str, str]) -> List[str]:
    """Interfaces named by *_SOCKET_IFNAME variables; an excluding list (^eth) names none that must exist."""
    names: List[str] = []
    for key, val in sorted(env.items()):
        if key.endswith("_SOCKET_IFNAME") and val and not val.startswith("^"):
            names += [n for n in val.split(",") if n and n not in names]
    return names


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
