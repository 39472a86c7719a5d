"""Reading and writing the run dir: the only thing ranks read."""
import json
import os
from typing import Any

from omegaconf import OmegaConf

RESOLVED_CONFIG = "config.yaml"
OVERRIDES = "overrides.yaml"  # the command-line overrides of this run (a sweep point's coordinates)


def write_json(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)  # readers never see half a file


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_run_config(run_dir: str):
    """The resolved config, re-typed by the schema, as every rank sees it."""
    from trl_ds.config.schema import RunConfig

    saved = OmegaConf.load(os.path.join(run_dir, RESOLVED_CONFIG))
    return OmegaConf.merge(OmegaConf.structured(RunConfig), saved)
