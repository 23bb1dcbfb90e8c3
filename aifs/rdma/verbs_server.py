"""The server half of verbs: a registered slot arena that clients READ, and one RC queue pair per client.

Blocks stay on disk in the store; `locate` copies a block into a slot of the
registered arena once, and clients then read it remotely as often as they
like (see `slots`). A client's queue pair lives as long as the TCP connection
that exchanged its keys.
"""

import logging
import mmap

from aifs.rdma.keys import QpInfo, RegionInfo
from aifs.rdma.pool import address_of
from aifs.rdma.slots import HEADER, SlotArena
from aifs.rdma.verbs import QueuePair, VerbsNic

log = logging.getLogger(__name__)

ARENA_BYTES = 1 << 30
SLOT_BYTES = (4 << 20) + (4 << 10)  # a 4 MiB block behind its header, page-rounded


class VerbsEndpoint:
    def __init__(self, device: str, arena_bytes: int = ARENA_BYTES, slot_bytes: int = SLOT_BYTES,
                 port: int = 1, gid_index: int = 0) -> None:
        if slot_bytes <= HEADER.size:
            raise ValueError(f"a slot of {slot_bytes} bytes cannot hold its own header")
        self._nic = VerbsNic(device, port, gid_index)
        self._memory = mmap.mmap(-1, arena_bytes)
        self._mr = self._nic.register(self._memory, remote_read=True)
        self.arena = SlotArena(memoryview(self._memory), slot_bytes)
        self.region = RegionInfo(address_of(self._memory), self._mr.rkey, arena_bytes, slot_bytes)
        log.info("RDMA on %s: %d slots of %d bytes registered", device, arena_bytes // slot_bytes, slot_bytes)

    def accept(self, client: QpInfo) -> QueuePair:
        """A queue pair connected to the client's, ready for its READs; the caller closes it."""
        qp = self._nic.queue_pair(remote_read=True, depth=1)
        try:
            qp.connect(client)
        except Exception:
            qp.close()
            raise
        return qp

    def close(self) -> None:
        self._mr.close()
        self._nic.close()
        self._memory.close()
