"""Parser verdicts that accepted, kept: the check runs the script up to its parser in a fresh interpreter that imports
transformers and TRL, which a relaunch of the same script with the same arguments need not pay again.

A verdict is kept only when the parser accepted, keyed by everything it reads: the script's source and the .py files
it can import from its folder; its arguments (trainer.yaml, ds_config.json, script_args, with the run dir's path
made neutral) and the world size; the Python, every installed distribution and trl_ds's check code; the script's
convention and PYTHONPATH. Read back, every file the check imported outside installed distributions must be
unchanged. A folder of more than MAX_FILES .py files is never kept. Not seen: other environment variables.
"""
import hashlib
import itertools
import os
import sys
from typing import Iterator, List, Optional

from trl_ds.cache_files import entry_path, read_entry, write_entry
from trl_ds.config.script_target import source_file
from trl_ds.config.values import world_size
from trl_ds.rundir.layout import DS_CONFIG, TRAINER_YAML

KIND = "parser_verdicts"
FORMAT = 2  # bump when the key's parts change
MAX_FILES = 200
# trl_ds/worker/: what runs the check and builds the arguments
CHECK_CODE = ("script.py", "script_argv.py", "script_verdict.py")


def accepted_before(key: Optional[str]) -> bool:
    """Kept under this key, and every file the check imported outside installed distributions as it was then."""
    stored = read_entry(entry_path(KIND, key)) if key else None
    if stored is None or stored.get("key") != key or not isinstance(stored.get("imported"), dict):
        return False
    return all(_digest([path]) == digest for path, digest in stored["imported"].items())


def remember_accepted(key: Optional[str], script: str, imported: List[str]) -> None:
    """imported: files the check imported outside installed distributions, to be found unchanged later."""
    if key:
        write_entry(entry_path(KIND, key), {"key": key, "script": script,
                                            "imported": {path: _digest([path]) for path in imported}})


def verdict_key(cfg, run_dir: str) -> Optional[str]:
    """None where the script's folder is too large to fingerprint (never kept)."""
    script = source_file(cfg.script)
    sources = _source_digest(script)
    if sources is None:
        return None
    inputs = [_read(os.path.join(run_dir, name)) for name in (TRAINER_YAML, DS_CONFIG)] + [repr(list(cfg.script_args))]
    worker = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "worker")
    return "\n".join([
        f"format {FORMAT}", sys.executable, sys.version, os.getcwd(), cfg.script, sources,
        f"convention {cfg.get('script_convention')}", f"PYTHONPATH {os.environ.get('PYTHONPATH', '')}",
        *(text.replace(run_dir, "<run dir>") for text in inputs), f"world {world_size(cfg)}",
        *_installed(), *(_digest([os.path.join(worker, name)]) for name in CHECK_CODE)])


def _source_digest(script: str) -> Optional[str]:
    beside = list(itertools.islice(_python_files(os.path.dirname(script)), MAX_FILES + 1))
    return None if len(beside) > MAX_FILES else _digest([script] + sorted(f for f in beside if f != script))


def _python_files(folder: str) -> Iterator[str]:
    """The folder's .py files, and those of the packages (folders with __init__.py) under it."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_file() and entry.name.endswith(".py"):
            yield entry.path
        elif entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")):
            yield from _python_files(entry.path)


def _digest(paths: List[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path}\n".encode())
        digest.update(_read(path).encode())
    return digest.hexdigest()


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _installed() -> List[str]:
    """Name and version of every distribution on sys.path, read from the metadata folders' names (no import)."""
    found = []
    for folder in sys.path:
        try:
            found += [e for e in os.listdir(folder or ".") if e.endswith((".dist-info", ".egg-info"))]
        except OSError:
            continue
    return sorted(found)
