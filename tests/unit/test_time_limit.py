"""The suite's per-test time limit (pyproject's [tool.pytest.ini_options]): pytest-timeout, with the signal method,
which fails the hung test by name and goes on to the next (the thread method ends the whole session)."""


def test_every_test_has_a_time_limit_that_fails_it_by_name(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert pytestconfig.getini("timeout") == "1200" and pytestconfig.getini("timeout_method") == "signal"
