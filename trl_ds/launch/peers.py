"""Node launchers tell each other about a failure through the main node's rendezvous store (torchrun's TCPStore).

Without it, a node whose ranks die before joining the process group leaves the other nodes' ranks waiting for
them until the process-group timeout (30 minutes).
"""
import os
from datetime import timedelta
from typing import Optional

FAILED_KEY = "trl_ds/failed_node"
CONNECT_TIMEOUT = timedelta(seconds=3)


class Peers:
    def __init__(self, endpoint: str):
        self.host, _, port = endpoint.rpartition(":")
        self.port = int(port)
        self.store = None
        self.gone = False  # the store is unreachable (not ours to wait for: the main node reports on its own)

    def failure(self) -> Optional[str]:
        """Another node's failure message, once one was announced."""
        store = self._connect()
        try:
            return store.get(FAILED_KEY).decode() if store and store.check([FAILED_KEY]) else None
        except Exception:  # the main node's launcher ended (normally at the end of a run)
            self._lose()
            return None

    def announce(self, message: str) -> None:
        store = self._connect()
        try:
            if store:
                store.set(FAILED_KEY, message)
        except Exception:  # the main node is gone too; each node reports its own failure anyway
            self._lose()

    def _connect(self):
        if self.store is None and not self.gone:
            # The store disappears when the main node's launcher ends, also after a good run: keep c10d's C++ layer
            # from printing a stack for that (read once, when torch loads; the ranks were started before).
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            from torch.distributed import TCPStore

            try:
                # A client that does not count as a rendezvous participant (wait_for_workers=False).
                self.store = TCPStore(self.host, self.port, is_master=False, timeout=CONNECT_TIMEOUT,
                                      wait_for_workers=False)
            except Exception:
                self._lose()
        return self.store

    def _lose(self) -> None:
        self.store, self.gone = None, True
