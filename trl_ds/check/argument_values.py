"""Values of TRL and transformers arguments that have a closed set of choices (trainer.lr_scheduler_type,
trainer.args.loss_type, ...), checked before launch against those libraries' own lists, naming the valid values.

The lists are read from the installed sources with `ast` (importing them imports torch). A field's choices come
from, first match: an enum in its annotation (SchedulerType, OptimizerNames, ...); its metadata's "choices"; the
values its help lists ("Possible values are: ..."). A field with none of these is left open.
"""
import ast
import dataclasses
import difflib
import functools
import importlib.util
import os
import re
from typing import Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from trl_ds.check.trl_arguments import CLASS_FILES, OWNED, PARSER_CLASSES
from trl_ds.config.schema import TrainerConfig
from trl_ds.config.values import value
from trl_ds.rundir.trainer_config import PASSTHROUGH

ENUM_FILES = ("trainer_utils.py", "training_args.py")  # transformers' modules that define its argument enums
# trl_ds narrows these itself with its own message (trainer_rules: report_to; the schema's enum: eval_strategy).
OWN_RULES = {"report_to", "eval_strategy"}
# A plain list in a help text: two or more quoted names, ending the sentence ("are 'a', 'b', and 'c'."); a list
# interleaved with prose ("'a'` (default): ... `'b'`: ...") does not match, and its field stays open.
NAME = r"`?'[\w.-]+'`?"
LISTED = re.compile(rf"(?:Possible|Supported) values are:?\s*({NAME}(?:\s*,?\s*(?:(?:and|or)\s+)?{NAME})+)\.")


@functools.lru_cache(maxsize=None)
def _source(package: str, path: str) -> ast.Module:
    spec = importlib.util.find_spec(package)  # a top-level package: found without running it
    with open(os.path.join(spec.submodule_search_locations[0], path)) as f:
        return ast.parse(f.read())


@functools.lru_cache(maxsize=None)
def transformers_enums() -> Dict[str, Tuple[str, ...]]:
    """{enum class name: its members' values} for the ExplicitEnum classes of transformers' argument modules."""
    enums = {}
    for path in ENUM_FILES:
        for node in _source("transformers", path).body:
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "ExplicitEnum" for b in node.bases):
                enums[node.name] = tuple(s.value.value for s in node.body if isinstance(s, ast.Assign)
                                         and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))
    return enums


@functools.lru_cache(maxsize=None)
def field_choices(class_name: str) -> Dict[str, Tuple[Tuple[str, ...], str]]:
    """{field: (valid values, where they come from)} for the closed fields of one config class and its bases."""
    package, path = CLASS_FILES[class_name]
    node = next(n for n in _source(package, path).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    found: Dict[str, Tuple[Tuple[str, ...], str]] = {}
    for base in node.bases:
        found.update(field_choices(ast.unparse(base)) if ast.unparse(base) in CLASS_FILES else {})
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            choices = _choices(class_name, stmt.target.id, stmt.annotation, stmt.value)
            if choices:
                found[stmt.target.id] = choices
            else:
                found.pop(stmt.target.id, None)  # a subclass that redefines a field reopens it
    return found


def _choices(owner: str, name: str, annotation: ast.expr, default: Optional[ast.expr]):
    enums = transformers_enums()
    named = [n.id for n in ast.walk(annotation) if isinstance(n, ast.Name) and n.id in enums]
    if named:
        return enums[named[0]], f"transformers' {named[0]} has"
    if name == "report_to":  # a string or list of integration names, no enum: transformers' own table of them
        return report_to_choices(), "transformers' INTEGRATION_TO_CALLBACK has"
    metadata = _metadata(default)
    library = "TRL" if CLASS_FILES[owner][0] == "trl" else "transformers"
    if isinstance(metadata.get("choices"), list):
        return tuple(metadata["choices"]), f"{library}'s {owner}.{name} takes"
    listed = LISTED.search(metadata.get("help", ""))
    if listed:
        return tuple(re.findall(r"'([\w.-]+)'", listed.group(1))), f"{library}'s {owner}.{name} takes"
    return None


def _metadata(default: Optional[ast.expr]) -> dict:
    """field(metadata={...})'s literal dict; {} when there is none or it is not a literal."""
    if not isinstance(default, ast.Call):
        return {}
    node = next((k.value for k in default.keywords if k.arg == "metadata"), None)
    try:
        return ast.literal_eval(node) if node is not None else {}
    except ValueError:
        return {}


@functools.lru_cache(maxsize=None)
def report_to_choices() -> Tuple[str, ...]:
    tree = _source("transformers", "integrations/integration_utils.py")
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(ast.unparse(t) == "INTEGRATION_TO_CALLBACK" for t in n.targets))
    return ("all", "none", *(k.value for k in table.keys))


def trainer_choices(trainer: str) -> Dict[str, Tuple[Tuple[str, ...], str]]:
    found: Dict[str, Tuple[Tuple[str, ...], str]] = {}
    for name in PARSER_CLASSES[trainer]:
        found.update(field_choices(name))
    return found


def check_argument_values(cfg) -> List[str]:
    """The trainer group's passthrough keys and trainer.args, each value against its field's valid values."""
    t, trainer = cfg.trainer, value(cfg.trainer.name)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}  # valid (a unit test holds them to it)
    given = {f"trainer.{k}": (k, value(t[k])) for k in PASSTHROUGH
             if k not in OWN_RULES and k in t and value(t[k]) != value(defaults.get(k))}
    args = OmegaConf.to_container(t.args) or {}
    given.update({f"trainer.args.{k}": (k, v) for k, v in args.items() if k not in OWNED})
    choices = None  # read only when some value is given: the default run parses no source
    problems = []
    for where, (name, given_value) in given.items():
        if not isinstance(given_value, (str, list)):
            continue  # numbers, flags: their types are checked by trl_arguments
        choices = choices if choices is not None else trainer_choices(trainer)
        if name not in choices:
            continue
        valid, source = choices[name]
        wrong = [v for v in (given_value if isinstance(given_value, list) else [given_value]) if v not in valid]
        if wrong:
            close = difflib.get_close_matches(str(wrong[0]), valid, n=1, cutoff=0.6)
            fix = f" Did you mean {where}={close[0]}?" if close else ""
            problems.append(f"{where}={_show(given_value)}: {', '.join(map(str, wrong))} is not a choice; {source} "
                            f"{', '.join(valid)}.{fix}")
    return problems


def _show(x) -> str:
    return f"[{','.join(map(str, x))}]" if isinstance(x, list) else str(x)
