"""Counts of the families params.py does not write out, kept by config: the first plan of such a config builds the
model on the meta device (imports torch: seconds); later plans of the same config.json, with the same transformers
version, read the count back without torch. One JSON file per config under $TRL_DS_CACHE (default
~/.cache/trl_ds/counts), written atomically; a file that cannot be read is a miss, never an error.
"""
import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

CACHE_ENV = "TRL_DS_CACHE"
FORMAT = 1  # bump when the stored fields change


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "trl_ds", "counts")


def path_for(config_json: str) -> str:
    try:
        transformers = version("transformers")
    except PackageNotFoundError:
        transformers = "none"
    key = hashlib.sha256(f"{FORMAT}\n{transformers}\n{config_json}".encode()).hexdigest()[:32]
    return os.path.join(cache_dir(), f"{key}.json")


def read(config_json: str) -> Optional[dict]:
    try:
        with open(path_for(config_json)) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) and stored.get("config_json") == config_json else None


def write(config_json: str, architecture: dict, layout: dict) -> None:
    """Best effort: a read-only or full home folder only costs the next plan its seconds."""
    path = path_for(config_json)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w") as f:
            json.dump({"config_json": config_json, "architecture": architecture, "layout": layout}, f)
        os.replace(partial, path)
    except OSError:
        pass
