"""Nothing silent: a key added with Hydra's `+` to any group of the schema is refused with the closest real name,
unless it is a DeepSpeed key by DeepSpeed's own name under zero.* or offload.*. A key given without the `+` is read
as if it had one (as_added). Run by compose() and by validate(); names only, no deepspeed import.
"""
import dataclasses
import difflib
import re
from typing import Any, Iterable, List, Sequence

from trl_ds.config.deepspeed_names import block_names
from trl_ds.config.values import offloads, schema_type, undeclared

# zero_optimization keys trl_ds sets from other groups
DERIVED_ZERO = {"offload_optimizer": "offload.optimizer=cpu|nvme (offload.NAME for its keys)",
                "offload_param": "offload.param=cpu|nvme (offload.NAME for its keys)"}
# what DeepSpeed's deprecated zero fields became, in trl_ds's words
REPLACED = {"offload_optimizer": "offload.optimizer=cpu", "offload_param": "offload.param=cpu",
            "offload_param or offload_optimizer": "offload.pin_memory",
            "gather_16bit_weights_on_model_save": "zero.stage3_gather_16bit_weights_on_model_save"}
# free-form maps under a declared name, checked by their own rules
FREE_FORM = {"cluster.env", "launcher.env", "model.extra", "trainer.args", "deepspeed", "zero.zenflow"}
_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*(\.[\w-]+)*")  # no package (@), no group path (/), no quoting


def as_added(overrides: Sequence[str]) -> List[str]:
    """Hydra refuses `key=value` for a key the schema lacks with "use +key=value", the wrong fix for a misspelling:
    such an override is passed on as `+key=value` (`++` inside a free-form map), so check_undeclared_keys answers it
    with the real name, and a DeepSpeed or TRL name is read alike with or without its `+`."""
    return [_as_added(o) for o in overrides]


def _as_added(override: str) -> str:
    key = override.split("=", 1)[0]
    if "=" not in override or not _PLAIN_KEY.fullmatch(key) or key.split(".")[0] == "hydra":
        return override  # flags, +/++/~ overrides, group paths, packages and Hydra's own keys are Hydra's
    path = ""
    for part in key.split("."):
        if path in FREE_FORM:
            return "++" + override
        node = schema_type(path)
        if node is None:
            return override  # a key below a plain value: Hydra's own message fits
        if part not in {f.name for f in dataclasses.fields(node)}:
            return "+" + override
        path = f"{path}.{part}" if path else part
    return override


def check_undeclared_keys(cfg) -> List[str]:
    problems = []
    for path in schema_paths(""):
        for key, given in undeclared(cfg, path).items():
            if path == "zero":
                problems += _zero_key(key, given)
            elif path == "offload":
                problems += _offload_key(cfg, key, given)
            else:
                declared = [f.name for f in dataclasses.fields(schema_type(path))]
                problems.append(unknown_key(path, key, given, declared))
    return problems


def schema_paths(path: str) -> Iterable[str]:
    """Every dataclass node of the schema, '' (the top) first."""
    yield path
    for f in dataclasses.fields(schema_type(path)):
        child = f"{path}.{f.name}" if path else f.name
        if child not in FREE_FORM and dataclasses.is_dataclass(f.type):
            yield from schema_paths(child)


def _zero_key(key: str, given: Any) -> List[str]:
    names = block_names("zero_optimization")
    shown = f"zero.{key}={show(given)}"
    if key in DERIVED_ZERO:
        return [f"{shown}: trl_ds writes zero_optimization.{key} itself. Use {DERIVED_ZERO[key]} instead."]
    if key not in names:
        declared = [f.name for f in dataclasses.fields(schema_type("zero"))]
        usable = [n for n, f in names.items() if not f.replaced_by]
        return [unknown_key("zero", key, given, declared + usable, "trl_ds's keys and DeepSpeed's zero_optimization")]
    entry = names[key]
    if entry.replaced_by:
        use = REPLACED.get(entry.replaced_by, f"zero.{entry.replaced_by}")
        return [f"{shown}: DeepSpeed deprecates {key} (use {entry.replaced_by}). Use {use} instead."]
    declared = {f.name for f in dataclasses.fields(schema_type("zero"))}
    twin = next((n for n in (entry.field, entry.alias) if n and n != key and n in declared), None)
    if twin:
        return [f"{shown}: {key} and {twin} are one DeepSpeed field, which trl_ds names {twin}. Use "
                f"zero.{twin}={show(given)} instead."]
    return []


def _offload_key(cfg, key: str, given: Any) -> List[str]:
    shown = f"offload.{key}={show(given)}"
    if key == "device":
        return [f"{shown}: trl_ds writes each offload block's device itself. Use offload.optimizer=cpu|nvme or "
                f"offload.param=cpu|nvme instead."]
    owners = [b for b in ("offload_optimizer", "offload_param") if key in block_names(b)]
    if not owners:
        declared = [f.name for f in dataclasses.fields(schema_type("offload"))]
        known = set(block_names("offload_optimizer")) | set(block_names("offload_param"))
        return [unknown_key("offload", key, given, declared + sorted(known - {"device"}),
                         "trl_ds's keys and DeepSpeed's offload_optimizer / offload_param")]
    if not offload_blocks_for(cfg, key):
        kinds = [b.split("_")[1] for b in owners]
        return [f"{shown} is a key of DeepSpeed's {' and '.join(owners)}, and "
                f"{' and '.join(f'offload.{k}=none' for k in kinds)} here: nothing would read it. Set "
                f"{' or '.join(f'offload.{k}=cpu' for k in kinds)}, or remove it."]
    return []


def offload_blocks_for(cfg, key: str) -> List[str]:
    """The offload blocks in use whose DeepSpeed class accepts key."""
    where = offloads(cfg)
    return [f"offload_{kind}" for kind in ("optimizer", "param")
            if where[kind] != "none" and key in block_names(f"offload_{kind}")]


def unknown_key(path: str, key: str, given: Any, names: List[str], checked: str = "") -> str:
    where = path or "the config"
    full = f"{path}.{key}" if path else key
    close = difflib.get_close_matches(key, sorted(set(names)), n=1, cutoff=0.6)
    fix = (f"Did you mean {path + '.' if path else ''}{close[0]}?" if close
           else f"Remove it; `python -m trl_ds --cfg job` shows every key of {where}.")
    return f"{full}={show(given)}: {where} has no key {key}{f' (checked: {checked})' if checked else ''}. {fix}"


def show(x: Any) -> str:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, dict):
        return "{" + ",".join(f"{k}:{show(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        return f"[{','.join(map(show, x))}]"
    return "null" if x is None else str(x)
