"""The import rule between trl_ds's folders, read from the source with ast (lazy imports inside functions count too).

    config  ← errors only               the typed schema, composition, derived values
    build   ← config                    what the run dir holds and where (build/layout.py names every file)
    plan    ← config                    counts, memory and step-time estimates, the grid, auto-fit
    worker  ← config, build             what a rank runs: it reads the run dir and nothing of the launching side
    launch  ← config, build             commands, scripts, the one spawner
    check   ← config, build, plan, launch   every rule before launch (the launchers check their own settings)
    study   ← config, build, plan, launch   reports over finished runs, calibration
    cli     ← everything                the `trl-ds` command and its pipeline

trl_ds/errors.py and trl_ds/short_lived.py import nothing of trl_ds and every folder may use them.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "trl_ds"
BASE = {"errors", "short_lived"}
ALLOWED = {
    "config": {"config"},
    "build": {"config", "build"},
    "plan": {"config", "plan"},
    "worker": {"config", "build", "worker"},
    "launch": {"config", "build", "launch"},
    "check": {"config", "build", "plan", "launch", "check"},
    "study": {"config", "build", "plan", "launch", "study"},
    "cli": {"config", "build", "plan", "worker", "launch", "check", "study", "cli"},
}
SHIMS = {"__init__", "__main__"}  # trl_ds/__main__.py and the old `python -m trl_ds.<x>` modules: cli's entry points


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
    """The folder (or base module) a trl_ds module belongs to; top-level modules are shims or base."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "trl_ds"


def problems_of(path: Path):
    own = layer(module_name(path))
    if own in BASE:
        allowed = set()
    elif own in ALLOWED:
        allowed = ALLOWED[own] | BASE
    else:  # a top-level module outside the folders: an entry point or a shim, which may import anything
        allowed = set(ALLOWED) | BASE
    for name, line in imported_modules(path):
        target = layer(name)
        if target == "trl_ds" or target not in allowed:
            yield f"{path.relative_to(PACKAGE.parent)}:{line}: {own} may not import {name}"


def test_every_import_follows_the_folder_rule():
    problems = [p for path in sorted(PACKAGE.rglob("*.py")) for p in problems_of(path)]
    assert problems == []


def test_every_module_lives_in_a_known_folder_or_is_a_base_module_or_shim():
    strays = [str(p.relative_to(PACKAGE)) for p in PACKAGE.glob("*.py")
              if p.stem not in BASE | SHIMS and not is_shim(p)]
    dirs = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert strays == [] and dirs == sorted(ALLOWED)


def is_shim(path: Path) -> bool:
    """An old `python -m trl_ds.<x>` form: a few lines that hand over to the module's new home."""
    return len(path.read_text().splitlines()) <= 15


@pytest.mark.parametrize("source, expected", [
    ("from trl_ds.plan.memory import estimate\n", ["trl_ds/worker/x.py:1: worker may not import trl_ds.plan.memory"]),
    ("def f():\n    from ..launch import run\n", ["trl_ds/worker/x.py:2: worker may not import trl_ds.launch"]),
    ("import trl_ds.cli.app\n", ["trl_ds/worker/x.py:1: worker may not import trl_ds.cli.app"]),
    ("from trl_ds.build.layout import SUMMARY\nfrom .data import NUMBERS\nfrom trl_ds.errors import ConfigError\n", []),
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
