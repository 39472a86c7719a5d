"""What `script=` names: a Python file or an importable module, its source file, and the parser convention it follows.

The convention decides what the script receives on each rank (trl_ds/worker/script_argv.py): a TrlParser script reads
`--config FILE`, an HfArgumentParser script takes training arguments as flags, any other script only its own
script_args. It is read from the source text, so nothing of the script runs to find it.
"""
import importlib.util
import os
import re
from typing import Optional

TRL_PARSER = "trl"  # TrlParser(...).parse_args_and_config(): `--config trainer.yaml`
HF_PARSER = "hf"  # transformers.HfArgumentParser: `--name value` flags of TrainingArguments
NO_PARSER = "none"  # neither: only the script's own script_args

_TRL = re.compile(r"\bTrlParser\b")
_HF = re.compile(r"\bHfArgumentParser\b")


def is_file_target(target: str) -> bool:
    """A path (it ends in .py, holds a slash, or exists here); otherwise a dotted module name."""
    return target.endswith(".py") or os.sep in target or "/" in target or os.path.exists(target)


def module_source(name: str) -> Optional[str]:
    """The module's source file as the import system finds it (its parent packages are imported; it is not), or None
    when it does not import. A package means its __main__ module, as `python -m` runs it."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except (ImportError, ValueError):  # a parent package that does not import, or an empty name part
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin


def source_file(target: str) -> Optional[str]:
    return os.path.abspath(target) if is_file_target(target) else module_source(target)


def parser_kind(source: str) -> str:
    """TrlParser wins over HfArgumentParser (it is one, plus `--config`)."""
    if _TRL.search(source):
        return TRL_PARSER
    return HF_PARSER if _HF.search(source) else NO_PARSER


def read_parser_kind(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parser_kind(f.read())
