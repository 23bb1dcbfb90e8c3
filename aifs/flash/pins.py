"""Which blocks a block server must never evict, kept across restarts.

A block is pinned when the remote tier holds its only copy (config says so
explicitly), so losing the pin on a restart would let LRU drop data. Pins are
rare; they are kept as an append-only journal of (pin|unpin, id) records that is
compacted when the server starts.
"""

import os
import struct
from pathlib import Path

from aifs.tiers.files import sync_dir

RECORD = struct.Struct("<BQ")
UNPIN, PIN = 0, 1


class PinJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def load(self, known: set[int]) -> set[int]:
        """Replay the journal; pins of blocks no longer stored are dropped while compacting."""
        pins: set[int] = set()
        data = self.path.read_bytes() if self.path.exists() else b""
        for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):  # a torn tail record is ignored
            op, block_id = RECORD.unpack_from(data, offset)
            (pins.add if op == PIN else pins.discard)(block_id)
        pins &= known
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(RECORD.pack(PIN, b) for b in sorted(pins)))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        tmp.replace(self.path)
        sync_dir(self.path.parent)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return pins

    def record(self, block_id: int, pinned: bool) -> None:
        os.write(self._fd, RECORD.pack(PIN if pinned else UNPIN, block_id))
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
