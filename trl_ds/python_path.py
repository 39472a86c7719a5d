"""PATH with this Python's folder first, so the launchers and ninja installed beside it (the venv's) come first."""
import os
import sys


def this_python_first(path: str) -> str:
    """DeepSpeed JIT-loads its ops through the first `ninja` on PATH. Another version's ninja (a system one on a
    node's login PATH) reads the op's build log as another format and rebuilds the op: about 20 s on this machine,
    and the next launch with the venv's ninja rebuilds it back."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir] + [p for p in path.split(os.pathsep) if p and p != bin_dir])


def install_command(extra: str, requirement: str, package_file: str = __file__, python: str = "") -> str:
    """The command that installs trl_ds's optional `extra` into this Python, for the way trl_ds was installed: from a
    source checkout (the package beside its pyproject.toml; `make run`'s .venv), pip's install of the checkout with
    that extra, run in it with the checkout's Python; else pip's install of the published package's extra."""
    import shlex

    python = python or sys.executable
    root = os.path.dirname(os.path.dirname(os.path.abspath(package_file)))
    if os.path.isfile(os.path.join(root, "pyproject.toml")):
        inside = os.path.abspath(python).startswith(root + os.sep)
        shown = os.path.relpath(python, root) if inside else python
        return f"cd {shlex.quote(root)} && {shlex.quote(shown)} -m pip install -e '.[{extra}]' ({requirement})"
    return f"{shlex.quote(python)} -m pip install 'trl_ds[{extra}]' ({requirement})"
