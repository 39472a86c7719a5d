"""scripts/run_tests.sh collects tests/unit, tests/configs and tests/integration in one pytest session (the light
integration tests run beside the unit tests): pytest's default import mode cannot hold two test modules of one name."""
from collections import Counter

from tests.conftest import REPO


def test_no_two_test_modules_share_a_name():
    names = Counter(p.name for folder in ("unit", "configs", "integration")
                    for p in (REPO / "tests" / folder).glob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
