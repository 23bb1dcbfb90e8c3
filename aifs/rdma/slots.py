"""Blocks in slots of a server's registered memory, and how clients read them with no server CPU.

The server copies a block into a fixed-size slot (on the first `locate`) and
tells the client where it sits; from then on the client reads it with
one-sided RDMA READs and never tells the server, so the server may recycle the
slot under a reader. Each slot starts with a header whose generation works as
a seqlock: it is odd while the slot is rewritten. A client READs the header,
the bytes it wants, and the header again (one RC queue pair executes READs in
order); equal, even headers naming its block mean the bytes are that block's,
and a whole-block read is also checked against the checksum. A stale slot
sends the client back to `locate` once, and then to a read over TCP.
"""

import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from aifs.rdma.pool import BufferPool, Chunk
from aifs.tiers.checksum import CorruptBlock, checksum

HEADER = struct.Struct("<4sIQQQ")  # magic, generation, block id, length, checksum
MAGIC = b"AIFS"
_GEN_MASK = 0xFFFFFFFF


class SlotTooSmall(Exception):
    """The block does not fit one slot; it is served over TCP instead."""


class SlotChurn(Exception):
    """The block's slot was recycled under every attempt (too few slots for the load): read it over TCP."""


@dataclass(frozen=True, slots=True)
class SlotRef:
    offset: int  # of the slot from the start of the registered region
    length: int  # of the block


class SlotArena:
    """Server side: least recently located blocks give up their slots first. Thread-safe."""

    def __init__(self, memory: memoryview, slot_bytes: int) -> None:
        count = len(memory) // slot_bytes
        if count == 0 or slot_bytes <= HEADER.size:
            raise ValueError(f"{len(memory)} bytes hold no slot of {slot_bytes} bytes")
        self.slot_bytes = slot_bytes
        self._mem = memory
        self._where: OrderedDict[int, int] = OrderedDict()  # block id -> slot, least recently located first
        self._lengths = [0] * count
        self._gens = [0] * count
        self._free = list(range(count - 1, -1, -1))
        self._lock = threading.Lock()

    def locate(self, block_id: int, load: Callable[[int], tuple[memoryview, int]]) -> SlotRef:
        """Where the block sits, copying it in first with `load` (-> bytes, checksum) if needed."""
        with self._lock:
            ref = self._resident(block_id)
        if ref is not None:
            return ref
        data, block_sum = load(block_id)  # disk I/O outside the lock
        if HEADER.size + len(data) > self.slot_bytes:
            raise SlotTooSmall(f"block {block_id:016x} of {len(data)} bytes exceeds a slot of {self.slot_bytes}")
        with self._lock:
            ref = self._resident(block_id)
            if ref is not None:
                return ref
            slot = self._free.pop() if self._free else self._where.popitem(last=False)[1]
            self._fill(slot, block_id, data, block_sum)
            self._where[block_id] = slot
            return SlotRef(slot * self.slot_bytes, len(data))

    def _resident(self, block_id: int) -> SlotRef | None:
        slot = self._where.get(block_id)
        if slot is None:
            return None
        self._where.move_to_end(block_id)
        return SlotRef(slot * self.slot_bytes, self._lengths[slot])

    def _fill(self, slot: int, block_id: int, data: memoryview, block_sum: int) -> None:
        base = slot * self.slot_bytes
        gen = (self._gens[slot] + 1) & _GEN_MASK  # odd: readers see the slot changing
        HEADER.pack_into(self._mem, base, MAGIC, gen, 0, 0, 0)
        self._mem[base + HEADER.size:base + HEADER.size + len(data)] = data
        gen = (gen + 1) & _GEN_MASK
        HEADER.pack_into(self._mem, base, MAGIC, gen, block_id, len(data), block_sum)
        self._gens[slot], self._lengths[slot] = gen, len(data)

    def forget(self, block_id: int) -> None:
        """The block was deleted: its slot must not serve it any more."""
        with self._lock:
            slot = self._where.pop(block_id, None)
            if slot is not None:
                gen = (self._gens[slot] + 2) & _GEN_MASK
                HEADER.pack_into(self._mem, slot * self.slot_bytes, MAGIC, gen, 0, 0, 0)
                self._gens[slot] = gen
                self._free.append(slot)


# A fetch executes RDMA READs in order: (offset in the server's region, offset in the pool, length).
Fetch = Callable[[list[tuple[int, int, int]], Chunk, float], None]
Locate = Callable[[int, float], SlotRef]


class StaleSlot(Exception):
    """The slot was recycled between locate and read."""


class SlotReader:
    """Client side: remembers where blocks sit on one server and reads them with `fetch`."""

    def __init__(self, locate: Locate, fetch: Fetch, pool: BufferPool, remembered: int = 1 << 16) -> None:
        self._locate = locate
        self._fetch = fetch
        self._pool = pool
        self._refs: OrderedDict[int, SlotRef] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def max_read(self) -> int:
        """The largest read that fits a pool chunk (its bytes between two headers)."""
        return self._pool.chunk_bytes - 2 * HEADER.size

    def read_into(self, block_id: int, buf: memoryview, offset: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        for _ in range(2):
            ref = self._ref(block_id, deadline)
            try:
                return self._read(block_id, ref, buf, offset, deadline)
            except StaleSlot:
                with self._lock:
                    self._refs.pop(block_id, None)
        raise SlotChurn(f"block {block_id:016x} kept moving between slots")

    def length(self, block_id: int, timeout: float) -> int:
        return self._ref(block_id, time.monotonic() + timeout).length

    def _ref(self, block_id: int, deadline: float) -> SlotRef:
        with self._lock:
            ref = self._refs.get(block_id)
            if ref is not None:
                self._refs.move_to_end(block_id)
                return ref
        ref = self._locate(block_id, _left(deadline))
        with self._lock:
            self._refs[block_id] = ref
            if len(self._refs) > self._remembered:
                self._refs.popitem(last=False)
        return ref

    def _read(self, block_id: int, ref: SlotRef, buf: memoryview, offset: int, deadline: float) -> int:
        start = min(offset, ref.length)
        n = min(len(buf), ref.length - start)
        if n > self.max_read():
            raise SlotTooSmall(f"a read of {n} bytes exceeds a registered chunk")
        with self._pool.borrow(_left(deadline)) as chunk:
            self._fetch([(ref.offset, chunk.offset, HEADER.size),
                         (ref.offset + HEADER.size + start, chunk.offset + HEADER.size, n),
                         (ref.offset, chunk.offset + HEADER.size + n, HEADER.size)], chunk, _left(deadline))
            first = HEADER.unpack_from(chunk.view, 0)
            if first != HEADER.unpack_from(chunk.view, HEADER.size + n) or not _names(first, block_id):
                raise StaleSlot()
            data = chunk.view[HEADER.size:HEADER.size + n]
            if start == 0 and n == ref.length and checksum(data) != first[4]:
                raise CorruptBlock(block_id, "flash (RDMA slot)")
            buf[:n] = data
        return n


def _names(header: tuple, block_id: int) -> bool:
    """A settled slot (even generation) that holds `block_id`."""
    magic, gen, held, _, _ = header
    return magic == MAGIC and gen % 2 == 0 and held == block_id


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
