"""Counts of the families params.py does not write out, kept by config: the first plan of such a config builds the
model on the meta device (imports torch: seconds); later plans of the same config.json, with the same transformers
version, read the count back without torch. One file per config in $TRL_DS_CACHE/counts (trl_ds/cache_files.py).
"""
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

from trl_ds.cache_files import entry_path, read_entry, write_entry

KIND = "counts"
FORMAT = 1  # bump when the stored fields change


def path_for(config_json: str) -> str:
    try:
        transformers = version("transformers")
    except PackageNotFoundError:
        transformers = "none"
    return entry_path(KIND, f"{FORMAT}\n{transformers}\n{config_json}")


def read(config_json: str) -> Optional[dict]:
    stored = read_entry(path_for(config_json))
    return stored if stored is not None and stored.get("config_json") == config_json else None


def write(config_json: str, architecture: dict, layout: dict) -> None:
    write_entry(path_for(config_json), {"config_json": config_json, "architecture": architecture, "layout": layout})
