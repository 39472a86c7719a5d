"""trl_ds's own cache: one small JSON file per entry under $TRL_DS_CACHE (default ~/.cache/trl_ds), a folder per kind
(counts/: parameter counts of meta-device families; parser_verdicts/: scripts' parsers that accepted their arguments).
Written atomically; a file that cannot be read is a miss, never an error, and a folder that cannot be written only
costs the next run the work again."""
import hashlib
import json
import os
from typing import Optional

CACHE_ENV = "TRL_DS_CACHE"


def entry_path(kind: str, key: str) -> str:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "trl_ds")
    return os.path.join(root, kind, hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def read_entry(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def write_entry(path: str, data: dict) -> None:
    """Best effort: a read-only or full home folder is not the run's problem."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w") as f:
            json.dump(data, f)
        os.replace(partial, path)
    except OSError:
        pass
