"""Counts kept by config, so that only a config's first plan builds the model on the meta device (meta_count.py,
imports torch) and every later plan reads the count back without torch: first the presets' counts shipped with the
package (preset_counts.json, from scripts/preset_counts.py), then one file per config in $TRL_DS_CACHE/counts,
keyed by the transformers version that counted it."""
import json
import os
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

from trl_ds.cache_files import entry_path, read_entry, write_entry

KIND = "counts"
FORMAT = 2  # bump when the stored fields change (and write preset_counts.json again)
SHIPPED = os.path.join(os.path.dirname(__file__), "preset_counts.json")


def path_for(config_json: str) -> str:
    try:
        transformers = version("transformers")
    except PackageNotFoundError:
        transformers = "none"
    return entry_path(KIND, f"{FORMAT}\n{transformers}\n{config_json}")


@lru_cache(maxsize=1)
def shipped() -> dict:
    """config JSON -> entry, for the presets (an absent or damaged file: none, each preset is then counted once)."""
    stored = read_entry(SHIPPED) or {}
    return stored.get("entries", {}) if stored.get("format") == FORMAT else {}


def read(config_json: str) -> Optional[dict]:
    entry = shipped().get(config_json)
    if entry is not None:
        return entry
    stored = read_entry(path_for(config_json))
    return stored if stored is not None and stored.get("config_json") == config_json else None


def write(config_json: str, entry: dict) -> None:
    write_entry(path_for(config_json), {**entry, "config_json": config_json})


def write_shipped(entries: dict, transformers: str) -> None:
    """preset_counts.json: one line per entry (sorted by config; each entry as the build gave it: the order of its
    Linears is the order refusals name them in), so that a change of one preset is one line of a diff."""
    lines = [f"{json.dumps(key)}: {json.dumps(entries[key], separators=(',', ':'))}"
             for key in sorted(entries)]
    with open(SHIPPED, "w") as f:
        f.write(f'{{"format": {FORMAT}, "transformers": {json.dumps(transformers)}, "entries": {{\n'
                + ",\n".join(lines) + "\n}}\n")
