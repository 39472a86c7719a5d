"""Small readers over the typed config shared by the builders and the validator."""
import os
from enum import Enum
from typing import Any, Optional, Sequence

from trl_ds.config.topology import topology
from trl_ds.errors import ConfigError

LOCAL_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
TINY_SIZE = 512  # rows of the built-in tiny training split: the worker writes them, the step count counts them


def value(x: Any) -> Any:
    """An enum's plain value (configs hold enums; JSON, YAML and messages want strings)."""
    return x.value if isinstance(x, Enum) else x


def world_size(cfg) -> int:
    return topology(cfg).world


def sp_size(cfg) -> int:
    """Ranks that share one sequence (1 without sequence parallelism)."""
    return topology(cfg).sp_size


def data_parallel_world(cfg) -> int:
    """Ranks that read different samples, world / (sp × tp): sequence- and tensor-parallel ranks share theirs."""
    return topology(cfg).data_parallel


def elastic_min_nodes(cfg) -> Optional[int]:
    """launcher.min_nodes when the launch may start on fewer than cluster.nodes (torchrun's c10d); else None."""
    low = cfg.launcher.min_nodes
    c10d = value(cfg.launcher.rdzv_backend) == "c10d"
    return low if c10d and low is not None and 1 <= low < cfg.cluster.nodes else None


def dtype(cfg) -> str:
    """The precision in force: `auto` means bf16 on cuda clusters and fp32 on CPU."""
    chosen = value(cfg.precision.dtype)
    if chosen == "auto":
        return "bf16" if value(cfg.cluster.device) == "cuda" else "fp32"
    return chosen


def offloads(cfg) -> dict:
    return {"optimizer": value(cfg.offload.optimizer), "param": value(cfg.offload.param)}


def is_local_path(name: str) -> bool:
    """A model or dataset name that must exist here rather than on the hub."""
    return name.startswith(("/", "./", "../", "~")) or name.endswith(LOCAL_DATA_SUFFIXES) or os.path.exists(name)


def micro_batch(cfg) -> Optional[int]:
    """trainer.per_device_train_batch_size; None while it is `auto` (trl_ds.plan.autofit replaces it before launch)."""
    micro = cfg.trainer.per_device_train_batch_size
    if micro == "auto":
        return None
    if isinstance(micro, bool) or not isinstance(micro, int):
        raise ConfigError([f"trainer.per_device_train_batch_size={micro} must be a positive integer or auto."])
    if micro < 1:
        raise ConfigError([f"trainer.per_device_train_batch_size={micro} must be a positive integer."])
    return micro


def checkpointing(cfg) -> Optional[bool]:
    """trainer.gradient_checkpointing; None while it is `auto`."""
    chosen = cfg.trainer.gradient_checkpointing
    if chosen == "auto":
        return None
    if not isinstance(chosen, bool):
        raise ConfigError([f"trainer.gradient_checkpointing={chosen} must be true, false or auto."])
    return chosen


def schema_type(path: str):
    """The dataclass the schema declares at a dotted path ('' is RunConfig), or None for a plain or free-form field."""
    import dataclasses

    from trl_ds.config.schema import RunConfig

    node = RunConfig
    for part in [p for p in path.split(".") if p]:
        kinds = {f.name: f.type for f in dataclasses.fields(node)}
        node = kinds.get(part)
        if not dataclasses.is_dataclass(node):
            return None
    return node


def undeclared(cfg, group: str) -> dict:
    """Keys added to a group with `+` that the schema lacks, as plain values (DeepSpeed's own names)."""
    import dataclasses

    from omegaconf import OmegaConf

    declared = {f.name for f in dataclasses.fields(schema_type(group))}
    node = OmegaConf.select(cfg, group) if group else cfg
    return {k: OmegaConf.to_container(node[k]) if OmegaConf.is_config(node[k]) else node[k]
            for k in node if k not in declared}


# The overrides that name a file users bring (check/resolve.py imports them); a key given by name wins over the
# file's value, a group choice (zero=stage3) does not, so advice under them names keys (zero.stage=3).
FILE_KEYS = ("launcher.from_accelerate", "deepspeed.from_file", "trainer.from_trl_config")


def brings_files(overrides: Sequence[str]) -> bool:
    """Whether the overrides name a file users bring."""
    return any(o.lstrip("+~").split("=", 1)[0] in FILE_KEYS for o in overrides)
