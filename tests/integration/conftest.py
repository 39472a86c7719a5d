"""Fixtures shared by integration tests that need more than one process: test hosts with their own addresses."""
import pytest

from tests.conftest import require
from tests.integration.hosts import TestHosts, missing_components


@pytest.fixture(scope="session")
def test_hosts(tmp_path_factory):
    """Two hosts (network namespaces, 10.88.0.1 and .2 on eth1, an sshd in each), torn down after the session."""
    missing = missing_components()
    require(not missing, f"test hosts need {', '.join(missing)}")
    hosts = TestHosts(tmp_path_factory.mktemp("test_hosts")).start()
    yield hosts
    hosts.stop()
