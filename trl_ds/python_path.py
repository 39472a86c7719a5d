"""PATH with this Python's folder first, so the launchers and ninja installed beside it (the venv's) come first."""
import os
import sys


def this_python_first(path: str) -> str:
    """DeepSpeed JIT-loads its ops through the first `ninja` on PATH. Another version's ninja (a system one on a
    node's login PATH) reads the op's build log as another format and rebuilds the op: about 20 s on this machine,
    and the next launch with the venv's ninja rebuilds it back."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir] + [p for p in path.split(os.pathsep) if p and p != bin_dir])
