"""The import rule between trl_ds's folders, read from the source with ast (lazy imports inside functions count too).

    config  ← errors only               the typed schema, composition, derived values
    rundir  ← config                    what the run dir holds and where (rundir/layout.py names every file)
    plan    ← config                    counts, memory and step-time estimates, the grid, auto-fit
    worker  ← config, rundir            what a rank runs: it reads the run dir and nothing of the launching side
    launch  ← config, rundir            commands, scripts, the one spawner
    check   ← config, rundir, plan, launch   every rule before launch (the launchers check their own settings)
    study   ← config, rundir, plan, launch   reports over finished runs, calibration
    cli     ← everything                the `trl-ds` command and its pipeline (trl_ds/cli/commands.py lists them)
    scripts ← everything                benchmarks, studies, setup (scripts/) and the GPU acceptance (tests/gpu/)

trl_ds/errors.py, short_lived.py, python_path.py, op_locks.py and cache_files.py import nothing of trl_ds and every
folder may use them.

A `__main__.py` is where Python looks for `python -m PACKAGE`, wherever the layers put that package: each one belongs
to the cli layer. It holds only the entry point (its only trl_ds import is of trl_ds.cli) and nothing imports it, so
importing its package never runs into cli: `python -m trl_ds.plan` is `trl-ds plan`, and trl_ds.plan still imports
nothing above config.
"""
import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "trl_ds"
SCRIPT_FOLDERS = ("scripts", "tests/gpu")  # run by path (`python scripts/bench/bench.py`), not shipped
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
SCRIPTS = set(ALLOWED) | BASE | {"scripts", "trl_ds"}
ENTRY = {"__init__", "__main__"}  # the top-level files that are not base modules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_script(path: Path) -> bool:
    return any(path.is_relative_to(PACKAGE.parent / folder) for folder in SCRIPT_FOLDERS)


def siblings(path: Path):
    """A script's own folder is first on sys.path when it runs: `import bench` there is scripts/.../bench.py."""
    return {p.stem: module_name(p) for p in path.parent.glob("*.py")} if is_script(path) else {}


def imported_modules(path: Path):
    """Every trl_ds, scripts or tests module `path` imports, absolute, with the line it is on."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    beside = siblings(path)
    ours = {"trl_ds", "scripts", "tests"}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ours:
                    yield alias.name, node.lineno
                elif alias.name.split(".")[0] in beside:
                    yield beside[alias.name.split(".")[0]], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
                if name.split(".")[0] in beside:
                    name = beside[name.split(".")[0]] + name[len(name.split(".")[0]):]
            if name.split(".")[0] in ours:
                yield name, node.lineno


def layer(module: str) -> str:
    """The folder (or base module) a module belongs to: an entry point's is cli; a script's is scripts."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "cli"
    if parts[0] in ("scripts", "tests"):
        return "scripts"
    return parts[1] if len(parts) > 1 else "trl_ds"  # trl_ds/__init__.py, which every import of trl_ds runs


def problems_of(path: Path):
    module = module_name(path)
    own = "scripts" if is_script(path) else layer(module)
    allowed = SCRIPTS if own == "scripts" else set() if own in BASE | {"trl_ds"} else ALLOWED[own] | BASE
    for name, line in imported_modules(path):
        target = layer(name)
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        if name.split(".")[-1] == "__main__":
            yield f"{where}: {name} is an entry point, which nothing imports"
        elif path.stem == "__main__" and not name.startswith("trl_ds.cli"):
            yield f"{where}: an entry point imports only trl_ds.cli, not {name}"
        elif target not in allowed:
            yield f"{where}: {own} may not import {name}"


def every_module():
    folders = [PACKAGE] + [PACKAGE.parent / folder for folder in SCRIPT_FOLDERS]
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def test_every_import_follows_the_folder_rule():
    problems = [p for path in every_module() for p in problems_of(path)]
    assert problems == []


def test_every_module_lives_in_a_known_folder_or_is_a_base_module():
    strays = [str(p.relative_to(PACKAGE)) for p in PACKAGE.glob("*.py") if p.stem not in BASE | ENTRY]
    dirs = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert strays == [] and dirs == sorted(ALLOWED)


def test_the_entry_points_are_the_ones_the_docs_name():
    assert sorted(module_name(p) for p in PACKAGE.rglob("__main__.py")) == [
        "trl_ds.__main__", "trl_ds.cli.__main__", "trl_ds.plan.__main__"]


@pytest.mark.parametrize("where, source, expected", [
    ("trl_ds/worker/x.py", "from trl_ds.plan.memory import estimate\n",
     ["trl_ds/worker/x.py:1: worker may not import trl_ds.plan.memory"]),
    ("trl_ds/worker/x.py", "def f():\n    from ..launch import run\n",
     ["trl_ds/worker/x.py:2: worker may not import trl_ds.launch"]),
    ("trl_ds/worker/x.py", "import trl_ds.cli.app\n", ["trl_ds/worker/x.py:1: worker may not import trl_ds.cli.app"]),
    ("trl_ds/__init__.py", "from trl_ds.cli.main import main\n",
     ["trl_ds/__init__.py:1: trl_ds may not import trl_ds.cli.main"]),
    ("trl_ds/worker/x.py",
     "from trl_ds.rundir.layout import SUMMARY\nfrom .data import NUMBERS\nfrom trl_ds.errors import ConfigError\n",
     []),
    ("trl_ds/plan/x.py", "import scripts.bench.bench\n",
     ["trl_ds/plan/x.py:1: plan may not import scripts.bench.bench"]),
    ("trl_ds/plan/__main__.py", "from trl_ds.cli.plan import main\n", []),
    ("trl_ds/plan/__main__.py", "from trl_ds.plan.need import need\n",
     ["trl_ds/plan/__main__.py:1: an entry point imports only trl_ds.cli, not trl_ds.plan.need"]),
    ("trl_ds/cli/x.py", "from trl_ds.plan.__main__ import main\n",
     ["trl_ds/cli/x.py:1: trl_ds.plan.__main__ is an entry point, which nothing imports"]),
    ("scripts/bench/x.py", "from trl_ds.cli.main import main\nimport tests.gpu.gpu_check\n", []),
])
def test_the_rule_catches_a_forbidden_import(tmp_path, monkeypatch, where, source, expected):
    # The checker itself, on a module written here: absolute, relative and lazy imports are all seen.
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "trl_ds")
    fake = tmp_path / where
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    assert list(problems_of(fake)) == expected


def import_graph(paths):
    """module -> the modules it imports (a package import counts as its __init__)."""
    modules = {module_name(path): path for path in paths}
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


def test_no_import_circle_in_the_package_or_the_scripts():
    assert cycles(import_graph(every_module())) == []


def test_the_circle_finder_sees_a_lazy_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_a_circle_between_two_scripts_by_their_bare_names_is_seen(tmp_path, monkeypatch):
    """`import bench_accelerate` in scripts/bench.py and `from bench import ...` back (#60 item 5)."""
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "trl_ds")
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "bench.py").write_text("def f():\n    import bench_accelerate\n")
    (folder / "bench_accelerate.py").write_text("from bench import REPO\n")
    assert cycles(import_graph(sorted(folder.glob("*.py")))) == [
        ["scripts.bench", "scripts.bench_accelerate", "scripts.bench"]]


def test_no_python_file_of_the_repository_is_over_700_lines():
    """#60: modules small enough to read whole; scripts and tests included."""
    files = [p for folder in ("trl_ds", "scripts", "tests") for p in (REPO / folder).rglob("*.py")]
    long = {str(p.relative_to(REPO)): n for p in files if (n := len(p.read_text().splitlines())) > 700}
    assert long == {}
