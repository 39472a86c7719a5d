"""What `script=` names: a Python file, a folder or package with __main__.py, or an importable module, its source file,
and the parser convention it follows, which decides what the script receives (trl_ds/worker/script_argv.py).

`script_convention=` states it; `auto` finds it from what the code calls (its syntax tree, not its words), following
its imports into modules of its folder or PYTHONPATH. Nothing of the script runs to find it.
"""
import ast
import importlib.util
import os
import sys
from typing import Iterator, List, NamedTuple, Optional, Set

TRL_PARSER = "trl"  # TrlParser(...).parse_args_and_config(): `--config trainer.yaml`
HF_PARSER = "hf"  # transformers.HfArgumentParser.parse_args_into_dataclasses: `--name value` flags
HF_FILE_PARSER = "hf_file"  # HfArgumentParser's parse_yaml_file / parse_json_file / parse_dict only: its own file
NO_PARSER = "none"  # neither: only the script's own script_args
AUTO = "auto"
CONVENTIONS = (AUTO, TRL_PARSER, HF_PARSER, HF_FILE_PARSER, NO_PARSER)
ARGV_ENTRY = "parse_args_into_dataclasses"
FILE_ENTRIES = ("parse_yaml_file", "parse_json_file", "parse_dict")
MAX_MODULES = 200  # modules followed from one script
REFUSAL = "trl_ds-refusal: "  # the parser check's prefix of each problem it found (worker/script_verdict.py)
IMPORTED = "trl_ds-imported: "  # the parser check's line of the files it imported outside installed distributions


class Convention(NamedTuple):
    kind: str
    where: Optional[str]  # the file whose code names the parser, or None
    stated: bool  # script_convention= said it
    files: List[str]  # the files read to find it (the script's own modules)


def is_folder_target(target: str) -> bool:
    """A folder (or package) with a __main__.py, named by its path: `python some_folder` runs it."""
    return os.path.isdir(target) and ("/" in target or os.sep in target or module_source(target) is None)


def is_file_target(target: str) -> bool:
    """A file path (it ends in .py, holds a slash, or exists here), not a folder; otherwise a dotted module name."""
    if os.path.isdir(target):
        return False
    return target.endswith(".py") or os.sep in target or "/" in target or os.path.exists(target)


def module_source(name: str) -> Optional[str]:
    """The module's source file as the import system finds it (a package: its __main__), or None."""
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
    if is_folder_target(target):
        return os.path.join(os.path.abspath(target), "__main__.py")
    return os.path.abspath(target) if is_file_target(target) else module_source(target)


def convention(cfg, path: Optional[str] = None) -> Convention:
    """script_convention= where stated, else found from the code at path (default: the script's)."""
    stated = str(cfg.get("script_convention") or AUTO)
    if stated != AUTO:
        return Convention(stated, None, True, [])
    return find_convention(path or source_file(cfg.script))


def find_convention(path: str) -> Convention:
    """TrlParser wins over HfArgumentParser (it is one, plus `--config`); an HfArgumentParser script that never calls
    parse_args_into_dataclasses but parses a file or dict is HF_FILE_PARSER."""
    names: Set[str] = set()
    where = {}
    files = []
    for file, tree in _modules(path):
        files.append(file)
        found = _called_names(tree)
        for name in found - names:
            where[name] = file
        names |= found
    for kind, needed in ((TRL_PARSER, "TrlParser"), (HF_PARSER, "HfArgumentParser")):
        if needed in names:
            if kind == HF_PARSER and ARGV_ENTRY not in names and names & set(FILE_ENTRIES):
                kind = HF_FILE_PARSER
            return Convention(kind, where[needed], False, files)
    return Convention(NO_PARSER, None, False, files)


def code_names(path: str) -> Set[str]:
    """Every name the script's code (and its own modules') uses."""
    names: Set[str] = set()
    for _, tree in _modules(path):
        names |= _called_names(tree)
    return names


def _called_names(tree: ast.AST) -> Set[str]:
    """Names and attributes the code uses (import lines included), none of its comments or strings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
    return found


def _modules(path: str) -> Iterator:
    """(file, syntax tree) of the script and of the modules it imports from its folder or PYTHONPATH."""
    roots = [os.path.dirname(os.path.abspath(path))] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p]
    seen, todo = set(), [os.path.abspath(path)]
    while todo and len(seen) < MAX_MODULES:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        tree = _parse(file)
        if tree is None:
            continue
        yield file, tree
        todo += [f for f in _imported_files(tree, os.path.dirname(file), roots) if f not in seen]


def _parse(file: str) -> Optional[ast.AST]:
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            return ast.parse(f.read(), file)
    except (OSError, SyntaxError, ValueError):
        return None


def _imported_files(tree: ast.AST, folder: str, roots: List[str]) -> List[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            bases = roots
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level:  # relative: from the importing file's package
                base = folder
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
                bases = [base]
            else:
                bases = roots
            names = [".".join(module)] if module else []
            names += [".".join(module + [alias.name]) for alias in node.names]  # `from pkg import module`
        else:
            continue
        for name in filter(None, names):
            found += [f for f in (_module_file(base, name) for base in bases) if f]
    return found


def _module_file(base: str, dotted: str) -> Optional[str]:
    stem = os.path.join(base, *dotted.split("."))
    for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
        if os.path.isfile(candidate) and not _installed(candidate):
            return os.path.abspath(candidate)
    return None


def own_modules(modules) -> List[str]:
    """The imported modules' source files outside installed distributions: the script's own."""
    files = {getattr(m, "__file__", None) for m in list(modules.values())}
    return sorted(os.path.abspath(f) for f in files if f and f.endswith(".py") and not _installed(f))


def _installed(path: str) -> bool:
    return "site-packages" in path.split(os.sep) or "dist-packages" in path.split(os.sep) or \
        os.path.abspath(path).startswith(os.path.abspath(sys.prefix) + os.sep + "lib")
