"""scripts/run_tests.sh collects tests/unit, tests/configs and tests/integration in one pytest session (the light
integration tests run beside the unit tests): pytest's default import mode cannot hold two test modules of one name."""
from collections import Counter

from tests.conftest import REPO


def test_no_two_test_modules_share_a_name():
    names = Counter(p.name for folder in ("unit", "configs", "integration")
                    for p in (REPO / "tests" / folder).rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_unit_tests_mirror_the_package_folders():
    """tests/unit/<folder>/ for trl_ds/<folder>/, tools/ for scripts/ and tests/gpu/; only tests of the repository as
    a whole (layers, docs, the suite itself) stay at the top."""
    unit = REPO / "tests" / "unit"
    package = {p.name for p in (REPO / "trl_ds").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders = {p.name for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - package == {"tools"}
    assert sorted(p.name for p in unit.glob("test_*.py")) == [
        "test_docs.py", "test_layers.py", "test_skips_in_ci.py", "test_suite_layout.py", "test_time_limit.py",
        "test_waited_clock.py"]


def test_no_test_takes_its_tolerance_from_the_code_under_test():
    """A bound imported from trl_ds loosens with the code it checks: each test states its own, with its reason."""
    import ast

    imported = []
    for path in (REPO / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trl_ds"):
                imported += [f"{path.relative_to(REPO)}: {a.name}" for a in node.names
                             if a.name.upper().endswith(("TOL", "TOLERANCE"))]
    assert imported == []
