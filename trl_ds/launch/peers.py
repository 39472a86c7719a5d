"""Node launchers tell each other about a failure through the TCPStore at cluster.master_addr:master_port: torchrun's
rendezvous store (node 0's agent, static or c10d) or, with the deepspeed launcher's no_ssh, the one rank 0 serves
for its process group (otherwise the other nodes' ranks wait until the process-group timeout). The store exists
only while its owner runs, so a node that has not reached it yet keeps trying (every RETRY_S), and a failure is
announced for up to ANNOUNCE_WAIT_S."""
import os
import time
from datetime import timedelta
from typing import Optional

FAILED_KEY = "trl_ds/failed_node"
CONNECT_TIMEOUT = timedelta(seconds=1)
RETRY_S = 2.0
ANNOUNCE_WAIT_S = 30.0


class Peers:
    def __init__(self, endpoint: str):
        self.host, _, port = endpoint.rpartition(":")
        self.port = int(port)
        self.store = None
        self.next_try = 0.0
        self.gone = False  # the store was reached, then went away: its owner ended (also after a good run)

    def failure(self) -> Optional[str]:
        """Another node's failure message, once one was announced."""
        store = self._connect()
        try:
            return store.get(FAILED_KEY).decode() if store and store.check([FAILED_KEY]) else None
        except Exception:  # the store's owner ended (normally at the end of a run)
            self._lose()
            return None

    def announce(self, message: str, wait_s: float = 0.0) -> bool:
        """Set the failure for the other nodes; keep trying to reach a store that is not there yet for wait_s."""
        deadline = time.monotonic() + wait_s
        while True:
            store = self._connect()
            if store:
                try:
                    store.set(FAILED_KEY, message)
                    return True
                except Exception:  # its owner is gone too; each node reports its own failure anyway
                    self._lose()
            if self.gone or time.monotonic() >= deadline:
                return False
            time.sleep(max(self.next_try - time.monotonic(), 0.0))

    def _connect(self):
        if self.store is None and not self.gone and time.monotonic() >= self.next_try:
            # The store disappears when its owner ends, also after a good run: keep c10d's C++ layer from printing
            # a stack for that (read once, when torch loads; the ranks were started before).
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            from torch.distributed import TCPStore

            self.next_try = time.monotonic() + RETRY_S
            try:
                # A client that does not count as a rendezvous participant (wait_for_workers=False).
                self.store = TCPStore(self.host, self.port, is_master=False, timeout=CONNECT_TIMEOUT,
                                      wait_for_workers=False)
            except Exception:  # not there yet (or no longer): tried again after RETRY_S
                pass
        return self.store

    def _lose(self) -> None:
        self.store, self.gone = None, True
