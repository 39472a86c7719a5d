"""scripts/run_tests.sh collects tests/unit, tests/configs and tests/integration in one pytest session (the light
integration tests run beside the unit tests): pytest's default import mode cannot hold two test modules of one name."""
from collections import Counter

from tests.conftest import REPO


def test_no_two_test_modules_share_a_name():
    names = Counter(p.name for folder in ("unit", "configs", "integration")
                    for p in (REPO / "tests" / folder).glob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


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
