"""What the importers of files users bring share (trl_recipe.py, deepspeed_json.py, accelerate_yaml.py): one shape for
a mapping, one way to print it, one rule for "given on the command line".

apply() sets every Mapping the command line did not give by name; choosing a group (trainer=sft) is not giving its
keys, only `trainer.learning_rate=...` by name wins over a file's learning_rate.
"""
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from trl_ds.config.compose import CONFIG_DIR


@dataclass(frozen=True)
class Mapping:
    source: str  # the file's key as written there ("optimizer.params.lr", "learning_rate")
    given: Any  # its value in the file
    key: str  # the trl_ds key it sets ("trainer.learning_rate")
    value: Any  # the value it sets


def groups() -> Tuple[str, ...]:
    """The config groups (conf/'s folders): `GROUP=option` chooses a preset and names no key."""
    return tuple(sorted(d for d in os.listdir(CONFIG_DIR) if os.path.isdir(os.path.join(CONFIG_DIR, d))))


def given_keys(command_line: Sequence[str]) -> List[str]:
    """The keys the command line gives by name; a group choice (`trainer=dpo`) gives none."""
    keys = [o.lstrip("+~").split("=", 1)[0] for o in command_line]
    chosen = set(groups())
    return [k for k in keys if k not in chosen]


def chosen_groups(command_line: Sequence[str]) -> Dict[str, str]:
    """The groups the command line chooses an option of (`zero=stage2` -> {"zero": "stage2"})."""
    pairs = [o.lstrip("+~").split("=", 1) for o in command_line if "=" in o]
    names = set(groups())
    return {k: v for k, v in pairs if k in names}


def preset_keys(group: str, option: Any) -> Tuple[str, ...]:
    """The keys a group's option sets (conf/zero/stage2.yaml: stage): those a file then overrides in silence."""
    import yaml

    path = os.path.join(CONFIG_DIR, group, f"{option}.yaml")
    if option is None or not os.path.isfile(path):
        return ()
    with open(path) as f:
        return tuple((yaml.safe_load(f) or {}).keys())


def _differs(before: Any, after: Any) -> bool:
    return str(before.value if hasattr(before, "value") else before) != str(after)


def given_by_name(key: str, given: Sequence[str]) -> bool:
    return any(key == g or key.startswith(g + ".") for g in given)


SHOWN_CHARS = 200  # a recipe's chat_template runs to kilobytes over many lines: a message line shows its start


def show(x: Any) -> str:
    """A file's value as one short line of override syntax."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (list, tuple)):
        return f"[{','.join(map(show, x))}]"
    text = "null" if x is None else str(x)
    flat = text.replace("\n", "\\n")
    return f"{flat[:SHOWN_CHARS]}... ({len(text)} characters)" if len(flat) > SHOWN_CHARS else flat


def line(m: Mapping) -> str:
    """`key: value -> override`, the one way every importer prints a mapping."""
    return f"  {m.source}: {show(m.given)} -> {m.key}={show(m.value)}"


def sources(lines: Sequence[str]) -> Dict[str, str]:
    """{trl_ds key: "FILE OVERRIDE's file key"} for each mapping apply() set, read back from its printed lines (the
    header `trl_ds: WHERE:`, then line()'s `  source: given -> key=value`), so a refusal can say where a value came
    from."""
    out, where = {}, None
    for text in lines:
        if text.startswith("trl_ds: ") and text.endswith(":"):
            where = text[len("trl_ds: "):-1]
        elif where and " -> " in text and not text.endswith("overridden on the command line"):
            left, right = text.rsplit(" -> ", 1)
            out[right.split("=", 1)[0]] = f"{where}'s {left.strip().split(': ', 1)[0]}"
    return out


def with_sources(problem: str, found: Dict[str, str]) -> str:
    """A refusal with the file and key each value it names came from."""
    import re

    named = [k for k in found if re.search(rf"(?<![\w.]){re.escape(k)}=", problem)]
    return problem + (f" ({'; '.join(f'{k}: {found[k]}' for k in named)})" if named else "")


def apply(cfg, where: str, mappings: Sequence[Mapping], notes: Sequence[str],
          command_line: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Set each mapping into cfg unless the command line gives its key by name: (printed lines, problems)."""
    given, chosen = given_keys(command_line), chosen_groups(command_line)
    lines, problems = [f"trl_ds: {where}:"], []
    for m in mappings:
        if given_by_name(m.key, given):
            lines.append(f"{line(m)}: overridden on the command line")
            continue
        before = OmegaConf.select(cfg, m.key, default=None)
        try:
            _set(cfg, m.key, m.value)
        except (OmegaConfBaseException, ValueError) as err:
            problems.append(f"{where}: {m.key}={show(m.value)}: {str(err).splitlines()[0]}")
            continue
        group, _, name = m.key.partition(".")
        # trainer=dpo chooses what a recipe's arguments are for; a zero/offload/cluster choice the file undoes is said
        wins = group != "trainer" and name in preset_keys(group, chosen.get(group)) and _differs(before, m.value)
        lines.append(f"{line(m)}: wins over {group}={chosen[group]} (a group choice names no key; "
                     f"{m.key}=... on the command line wins over the file)" if wins else line(m))
    return lines + [f"  {n}" for n in notes], problems


def _set(cfg, key: str, value: Any) -> None:
    """cfg.key = value; an undeclared key is added as Hydra's `+` adds it (its parent node opened)."""
    parent = OmegaConf.select(cfg, key.rsplit(".", 1)[0]) if "." in key else cfg
    with open_dict(cfg), open_dict(parent if OmegaConf.is_config(parent) else cfg):
        OmegaConf.update(cfg, key, value, merge=False)


def load_yaml(f) -> Any:
    """A YAML file for read_mapping: its syntax errors as ValueError, as json.load's are."""
    import yaml
    try:
        return yaml.safe_load(f)
    except yaml.YAMLError as err:
        raise ValueError(f"not YAML: {str(err).splitlines()[0]}") from None


def read_mapping(path: str, where: str, kind: str, loader) -> Tuple[dict, List[str]]:
    """The file's top-level mapping, or ({}, [the one-line problem]); loader parses an open file."""
    full = os.path.expanduser(path)
    if os.path.isdir(full):
        return {}, [f"{where} is a directory. Give {kind}."]
    if not os.path.isfile(full):
        return {}, [f"{where} does not exist. Give {kind}."]
    try:
        with open(full) as f:
            data = loader(f)
    except ValueError as err:  # json.JSONDecodeError and yaml.YAMLError (re-raised as ValueError by the loader)
        return {}, [f"{where} cannot be read ({str(err).splitlines()[0]}). Give {kind}."]
    if not isinstance(data, dict):
        return {}, [f"{where} holds no mapping of keys to values. Give {kind}."]
    return data, []
