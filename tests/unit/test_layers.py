"""The import rule between trl_ds's folders, read from the source with ast (lazy imports inside functions count too).

    config  ← errors only               the typed schema, composition, derived values
    rundir  ← config                    what the run dir holds and where (rundir/layout.py names every file)
    plan    ← config                    counts, memory and step-time estimates, the grid, auto-fit
    worker  ← config, rundir            what a rank runs: it reads the run dir and nothing of the launching side
    launch  ← config, rundir            commands, scripts, the one spawner
    check   ← config, rundir, plan, launch   every rule before launch (the launchers check their own settings)
    study   ← config, rundir, plan, launch   reports over finished runs, calibration
    cli     ← everything                the `trl-ds` command and its pipeline

trl_ds/errors.py, short_lived.py, python_path.py, op_locks.py and cache_files.py import nothing of trl_ds and every
folder may use them.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "trl_ds"
BASE = {"errors", "short_lived", "python_path", "op_locks", "cache_files"}
ALLOWED = {
    "config": {"config"},
    "rundir": {"config", "rundir"},
    "plan": {"config", "plan"},
    "worker": {"config", "rundir", "worker"},
    "launch": {"config", "rundir", "launch"},
    "check": {"config", "rundir", "plan", "launch", "check"},
    "study": {"config", "rundir", "plan", "launch", "study"},
    "cli": {"config", "rundir", "plan", "worker", "launch", "check", "study", "cli"},
}
ENTRY = {"__init__", "__main__"}  # trl_ds/__main__.py: `python -m trl_ds`, which is `trl-ds run`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path):
    """Every trl_ds module `path` imports, absolute, with the line it is on."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "trl_ds")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.split(".")[0] == "trl_ds":
                yield name, node.lineno


def layer(module: str) -> str:
    """The folder (or base module) a trl_ds module belongs to; top-level modules are the entry point or base."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "trl_ds"


def problems_of(path: Path):
    own = layer(module_name(path))
    if own in BASE:
        allowed = set()
    elif path.stem == "__main__":  # an entry point (`python -m trl_ds.plan` is `trl-ds plan`) may import anything
        allowed = set(ALLOWED) | BASE
    elif own in ALLOWED:
        allowed = ALLOWED[own] | BASE
    else:  # trl_ds/__main__.py, the entry point, may import anything
        allowed = set(ALLOWED) | BASE
    for name, line in imported_modules(path):
        target = layer(name)
        if target == "trl_ds" or target not in allowed:
            yield f"{path.relative_to(PACKAGE.parent)}:{line}: {own} may not import {name}"


def test_every_import_follows_the_folder_rule():
    problems = [p for path in sorted(PACKAGE.rglob("*.py")) for p in problems_of(path)]
    assert problems == []


def test_every_module_lives_in_a_known_folder_or_is_a_base_module():
    strays = [str(p.relative_to(PACKAGE)) for p in PACKAGE.glob("*.py") if p.stem not in BASE | ENTRY]
    dirs = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert strays == [] and dirs == sorted(ALLOWED)


@pytest.mark.parametrize("source, expected", [
    ("from trl_ds.plan.memory import estimate\n", ["trl_ds/worker/x.py:1: worker may not import trl_ds.plan.memory"]),
    ("def f():\n    from ..launch import run\n", ["trl_ds/worker/x.py:2: worker may not import trl_ds.launch"]),
    ("import trl_ds.cli.app\n", ["trl_ds/worker/x.py:1: worker may not import trl_ds.cli.app"]),
    ("from trl_ds.rundir.layout import SUMMARY\nfrom .data import NUMBERS\nfrom trl_ds.errors import ConfigError\n",
     []),
])
def test_the_rule_catches_a_forbidden_import(tmp_path, source, expected):
    # The checker itself, on a module written here: absolute, relative and lazy imports are all seen.
    global PACKAGE
    fake = tmp_path / "trl_ds" / "worker"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text(source)
    saved, PACKAGE = PACKAGE, tmp_path / "trl_ds"
    try:
        assert list(problems_of(fake / "x.py")) == expected
    finally:
        PACKAGE = saved


def import_graph():
    """module -> the trl_ds modules it imports (a package import counts as its __init__)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {target for target, _ in imported_modules(path) if target in modules and target != name}
            for name, path in modules.items()}


def cycles(graph):
    """Every import circle, each once, as the modules along it (depth-first, three colours)."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_the_circle_finder_sees_a_lazy_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
