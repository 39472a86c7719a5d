"""A failure announced to a main store that is not up yet (a real TCPStore opened 3 s later): moved from
tests/unit/check/test_rendezvous.py, as it waits for real."""
import threading
import time
from datetime import timedelta

import pytest

from tests.unit.check.test_rendezvous import free_port
from trl_ds.launch.peers import Peers

pytestmark = [pytest.mark.integration, pytest.mark.light, pytest.mark.xdist_group("waits")]


def test_a_failure_announced_before_the_main_store_is_up_reaches_it():
    """With no_ssh the main store is rank 0's, which appears only once rank 0 has imported its packages: node 1's
    launcher, failing first, keeps trying; node 0's reads the message once its store is up."""
    from torch.distributed import TCPStore

    port = free_port()
    stores = []
    opened = threading.Timer(3.0, lambda: stores.append(TCPStore("127.0.0.1", port, is_master=True,
                                                                 timeout=timedelta(seconds=10),
                                                                 wait_for_workers=False)))
    opened.start()
    started = time.monotonic()
    assert Peers(f"127.0.0.1:{port}").announce("node 1 failed: rank 1 died", wait_s=20)
    assert 3.0 <= time.monotonic() - started < 15
    assert Peers(f"127.0.0.1:{port}").failure() == "node 1 failed: rank 1 died"
    assert not Peers(f"127.0.0.1:{free_port()}").announce("nobody listens", wait_s=0)
