"""A block server's store: immutable blocks in append-only segments, within a byte budget.

Each record is the block's checksum followed by its bytes, so the checksum
survives a restart along with the index rebuilt from the segment headers.
Bytes are verified on the way in (a put whose bytes do not match its checksum
is refused) and on the way out (a rotten record is dropped, never served).
When the budget is reached, the least recently used unpinned block goes first.

Past a damaged record header, a record is kept only when its bytes match the
checksum it carries; the damaged bytes are neutralised and their blocks dropped:
the store is a cache.
"""

import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from aifs.flash.pins import PinJournal
from aifs.tiers.checksum import Buffer, checksum
from aifs.tiers.segments import SEGMENT_BYTES, Found, Location, SegmentLog

log = logging.getLogger(__name__)

SUM = struct.Struct("<Q")


class ChecksumMismatch(Exception):
    """A put whose bytes do not match the checksum its sender computed."""


class StoreFull(Exception):
    """No room even after evicting every unpinned block."""


class Refused(Exception):
    """A request this store declines by design (a mount's tiers answer to that mount, not to its peers)."""


class CorruptRecord(Exception):
    """A stored block failed its checksum; it has been dropped."""


class Record:
    """Room for a block's bytes behind its checksum, so a received block is appended without a copy."""

    def __init__(self, length: int) -> None:
        self.buf = bytearray(SUM.size + length)
        self.payload = memoryview(self.buf)[SUM.size:]


class ServedStore(Protocol):
    """What a block server answers from: a flash server's own BlockStore, or the tiers of a mount
    serving its peers. `read_cached` runs on the server's event loop (None: needs a thread)."""

    def size(self, block_id: int) -> int: ...

    def read_cached(self, block_id: int, offset: int = 0,
                    length: int = -1) -> tuple[memoryview, int, int | None] | None: ...

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[memoryview, int, int | None]: ...

    def put(self, block_id: int, record: "Record", expected: int, pin: bool) -> None: ...

    def delete(self, block_id: int) -> None: ...

    def unpin(self, block_id: int) -> None: ...

    def contains(self, block_id: int) -> bool: ...

    def stat(self) -> dict[str, int]: ...


class BlockStore:
    """Thread-safe: the index is guarded by one lock, reads of segment bytes run outside it."""

    def __init__(self, root: Path, capacity: int, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.capacity = capacity
        # Appends go through the page cache, the server's RAM for its hot set: a block just
        # offered was just read or written by a node, and other nodes often want it next.
        self._log = SegmentLog(root / "segments", segment_bytes)
        self._index: dict[int, Location] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()  # unpinned blocks, least recently used first
        self._pinned: set[int] = set()
        self._used = 0
        self._lock = threading.Lock()
        for block_id, location, _ in self._log.rebuild():  # the server never stages
            self._add(block_id, location)
        if self._log.damaged:
            self._settle_damage()
        self._pins = PinJournal(root / "pins")
        for block_id in self._pins.load(set(self._index)):
            del self._lru[block_id]
            self._pinned.add(block_id)
        with self._lock:
            self._make_room(0)  # the budget may have shrunk since the last run

    def _settle_damage(self) -> None:
        """Keep the records past damaged headers that verify; neutralise the rest (logged)."""
        salvage = self._log.settle(self._verifies, {}, {}, self._index)
        for found in salvage.records:
            self._add(found.block_id, found.location)
        for region in salvage.regions:
            done = self._log.neutralise(region)
            log.warning("damaged segment bytes %s: the blocks in them are dropped (%s)", region.describe(), done)

    def _verifies(self, found: Found) -> bool:
        """Whether a record carries its own checksum and its bytes match it."""
        raw = self._log.read(found.location)
        return len(raw) >= SUM.size and SUM.unpack_from(raw)[0] == checksum(memoryview(raw)[SUM.size:])

    def _add(self, block_id: int, location: Location) -> None:
        if block_id in self._index:  # a duplicate left by a crash: keep the newer record
            self._drop(block_id)
        self._index[block_id] = location
        self._lru[block_id] = None
        self._used += location.length

    def _drop(self, block_id: int) -> None:
        location = self._index.pop(block_id)
        self._lru.pop(block_id, None)
        if block_id in self._pinned:
            self._pinned.discard(block_id)
            self._pins.record(block_id, False)
        self._used -= location.length
        self._log.kill(location)

    def _make_room(self, size: int) -> None:
        if size > self.capacity:
            raise StoreFull(f"a record of {size} bytes is larger than the capacity {self.capacity}")
        while self._used + size > self.capacity:
            if not self._lru:
                raise StoreFull(f"{self._used} of {self.capacity} bytes are pinned")
            victim = next(iter(self._lru))
            log.debug("evicting block %016x", victim)
            self._drop(victim)

    def put(self, block_id: int, record: Record, expected: int, pin: bool = False) -> None:
        """Store a block (a no-op when it is already held: blocks are immutable)."""
        if checksum(record.payload) != expected:
            raise ChecksumMismatch(f"block {block_id:016x}: bytes do not match checksum {expected:016x}")
        SUM.pack_into(record.buf, 0, expected)
        with self._lock:
            if block_id not in self._index:
                self._make_room(len(record.buf))
                self._add(block_id, self._log.append(block_id, record.buf))
            if pin and block_id not in self._pinned:
                self._lru.pop(block_id, None)
                self._pinned.add(block_id)
                self._pins.record(block_id, True)
            segment = self._index[block_id].segment
        if pin:  # a pinned block may be the only copy: it must survive power loss
            self._log.sync({segment})

    def unpin(self, block_id: int) -> None:
        with self._lock:
            if block_id in self._pinned:
                self._pinned.discard(block_id)
                self._pins.record(block_id, False)
                self._lru[block_id] = None

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[memoryview, int, int | None]:
        """(the bytes from `offset`, the block's size, its checksum); KeyError when not held.

        A whole block is checked against its checksum here; a part of one is read alone,
        with one disk read and no checksum (None), and left to the client, which checks
        it against the chunk checksums it keeps (reading and hashing 4 MiB to serve
        4 KiB would make small reads slow).
        """
        found = self._read_with(self._log.read, block_id, offset, length)
        assert found is not None  # SegmentLog.read always returns bytes
        return found

    def read_cached(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[memoryview, int, int | None] | None:
        """`read` from the page cache only: None when any byte would need the disk, so the
        server's event loop answers at once what memory holds and leaves the disk to threads."""
        return self._read_with(self._log.read_cached, block_id, offset, length)

    def _read_with(self, read: Callable[[Location, int, int | None], Buffer | None], block_id: int, offset: int,
                   length: int) -> tuple[memoryview, int, int | None] | None:
        with self._lock:
            location = self._index[block_id]
            if block_id in self._lru:
                self._lru.move_to_end(block_id)
        size = location.length - SUM.size
        if offset > 0 or 0 <= length < size:
            part = self._read(read, block_id, location, SUM.size + offset, length)
            return None if part is None else (memoryview(part), size, None)
        raw = self._read(read, block_id, location, 0, None)
        if raw is None:
            return None
        (expected,) = SUM.unpack_from(raw)
        data = memoryview(raw)[SUM.size:]
        if checksum(data) != expected:
            with self._lock:
                if self._index.get(block_id) != location:  # its hole was punched while we read
                    raise KeyError(block_id)
                self._drop(block_id)
            log.error("block %016x failed its checksum on disk; dropped it", block_id)
            raise CorruptRecord(f"block {block_id:016x} failed its checksum on this server")
        return data, len(data), expected

    @staticmethod
    def _read(read: Callable[[Location, int, int | None], Buffer | None], block_id: int, location: Location,
              offset: int, length: int | None) -> Buffer | None:
        try:
            return read(location, offset, length)
        except (OSError, KeyError):  # evicted while being read
            raise KeyError(block_id) from None

    def delete(self, block_id: int) -> None:
        with self._lock:
            if block_id in self._index:
                self._drop(block_id)

    def contains(self, block_id: int) -> bool:
        return block_id in self._index

    def size(self, block_id: int) -> int:
        """Bytes of the block's record (0 when not held): whether reading it is worth a thread."""
        location = self._index.get(block_id)
        return location.length if location is not None else 0

    def stat(self) -> dict[str, int]:
        with self._lock:
            return {"capacity": self.capacity, "used": self._used, "blocks": len(self._index),
                    "pinned": len(self._pinned)}

    def close(self) -> None:
        self._log.close()
        self._pins.close()
