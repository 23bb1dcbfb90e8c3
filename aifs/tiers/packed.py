"""The durable tier as the layers above see it once small blocks are packed.

A packed block is read from its pack: a ranged GET of its bytes alone. A reader that goes
through a pack in order (three members in a row, or the first member of a pack right after
streaming the previous one) gets the rest of the pack in one request instead, and while it
reads those bytes the next few packs (in upload order, which is the order the files were
closed in) are fetched whole in the background. Fetched bytes wait here, within a budget,
for the reads that follow. A pack that readers waiting for their bytes jump about in (a
shuffle coming back to it) is fetched whole too, and its members are handed to the tiers
above, which keep them on NVMe: a shuffled epoch costs a few requests per pack rather than
one per file. Every byte is still checked against the block's own checksums by the tier
manager.
"""

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from aifs.meta.packs import PackRecord, PackSlot
from aifs.tiers.protocol import ColdTier, PromotionSink

log = logging.getLogger(__name__)

AHEAD = 8  # members a read may skip past the last one read in its pack and still be in order
BEHIND = 8  # members a read may fall behind the last one read without breaking the order
STREAK = 2  # in-order reads of a pack before the rest of it is fetched at once
FOLLOW = 8  # reads of fetched pack bytes after which the packs after it may be fetched too
SPREAD = 4  # ...if those reads lie within this many times their own length from the start
PROMOTE_AFTER = 2  # jumps within a pack by waiting readers after which its members go to the tiers above
HELD_BYTES = 64 << 20  # pack bytes fetched ahead and waiting to be read
PACKS_AHEAD = 4  # packs fetched at once ahead of a reader going in order: one GET is not enough to stream
TRACKED_PACKS = 4096


class PackIndex(Protocol):
    def slot_of(self, block_id: int) -> PackSlot | None: ...

    def pack_record(self, pack_id: int) -> PackRecord | None: ...

    def next_pack(self, pack_id: int) -> int | None: ...

    def packed_blocks(self) -> dict[int, PackSlot]: ...

    def pack_ids(self) -> set[int]: ...


class _Held:
    """Bytes [start, start + len(data)) of one pack, fetched ahead, the members they hold
    whole, and how far the reads served from them have reached."""

    def __init__(self, start: int, data: bytes, members: list[int]) -> None:
        self.start, self.data, self.members = start, data, members
        self.hits = 0
        self.reach = start

    def served(self, offset: int, length: int) -> bool:
        """Note a read served from these bytes; True once FOLLOW reads have gone through
        them from the start, close together: readers going in order, who will want the
        next packs. Reads scattered over the pack (a shuffled order) say nothing of it."""
        self.hits += 1
        self.reach = max(self.reach, offset + length)
        return self.hits == FOLLOW and self.reach - self.start <= SPREAD * FOLLOW * length

    def slice(self, offset: int, length: int) -> bytes | None:
        lo = offset - self.start
        if lo < 0 or lo + length > len(self.data):
            return None
        return self.data[lo:lo + length]


class PackedStore:
    """A ColdTier around the real one (S3, or a local directory) that resolves packed blocks.
    Thread-safe: the tier manager reads on several cold-tier threads at once."""

    def __init__(self, inner: ColdTier, index: PackIndex) -> None:
        self.inner = inner
        self.index = index
        self._lock = threading.Lock()
        self._streaks: OrderedDict[int, tuple[int, int, int]] = OrderedDict()  # pack -> (end of last read, streak, jumps)
        self._streaming = False  # the last fetch ahead reached its pack's end
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self._held_slots: dict[int, PackSlot] = {}  # the members of the packs held, by block id
        self._held_bytes = 0
        self._fetching: dict[int, threading.Event] = {}
        self._sink: PromotionSink | None = None
        self._background = ThreadPoolExecutor(PACKS_AHEAD + 1, thread_name_prefix="aifs-packs-ahead")
        self.fetched_ahead = 0  # packs read to their end in one request

    def __getattr__(self, name: str) -> Any:
        """What else the durable tier offers (its name, capacity, breaker, marker state)."""
        return getattr(self.inner, name)

    # -- reads ---------------------------------------------------------------------------

    def get(self, block_id: int, demand: bool = False) -> bytes | None:
        return self.get_range(block_id, 0, None, demand)

    def get_range(self, block_id: int, offset: int, length: int | None, demand: bool = False) -> bytes | None:
        """Bytes of a block (to its end with `length` None). A block found in no pack whose
        object is gone may have just moved into one (aifs pack): it is looked up again."""
        slot = self.index.slot_of(block_id)
        if slot is None:
            data = self.inner.get(block_id) if length is None else self.inner.get_range(block_id, offset, length)
            if data is not None or (slot := self.index.slot_of(block_id)) is None:
                return data
        length = slot.length - offset if length is None else min(length, slot.length - offset)
        return self._read(slot, offset, length, demand)

    def _read(self, slot: PackSlot, offset: int, length: int, demand: bool) -> bytes | None:
        """From the bytes fetched ahead, else from a fetch of the rest of the pack when its
        reader goes in order, else by a ranged read of these bytes alone. The rest is fetched
        from a few members back, for readers working in parallel that are a little behind."""
        start = slot.offset + offset
        data = self._from_held(slot.pack_id, start, length)
        if data is None and self._in_order(slot, demand):
            self._fetch(slot.pack_id, max(0, slot.offset - BEHIND * slot.length))
            data = self._from_held(slot.pack_id, start, length)
        return data if data is not None else self.inner.get_range(slot.pack_id, start, length)

    def get_held(self, block_id: int, offset: int, length: int | None) -> bytes | None:
        """A packed block's bytes (to its end with `length` None) when its pack's bytes are
        held here: no request, no wait, no metadata read, so an event loop may ask."""
        with self._lock:
            slot = self._held_slots.get(block_id)
            if slot is None:
                return None
            length = slot.length - offset if length is None else min(length, slot.length - offset)
            return self._take(slot.pack_id, slot.offset + offset, length)

    def _from_held(self, pack_id: int, start: int, length: int) -> bytes | None:
        """Bytes of a pack fetched ahead, waiting for a fetch of them under way first."""
        with self._lock:
            fetching = self._fetching.get(pack_id)
        if fetching is not None:
            fetching.wait()
        with self._lock:
            return self._take(pack_id, start, length)

    def _take(self, pack_id: int, start: int, length: int) -> bytes | None:
        """Bytes of a pack held here (the caller holds the lock). Once they show their readers
        going in order, the packs after it are fetched in the background."""
        held = self._held.get(pack_id)
        data = None if held is None else held.slice(start, length)
        if data is not None and held.served(start, length):
            self._background.submit(self._guessed, self._follow, pack_id)
        return data

    def _in_order(self, slot: PackSlot, demand: bool) -> bool:
        """Note this read of a pack; True when its reader goes through the pack in order.
        A member a little ahead of the last one read continues a streak; one a little
        behind leaves it be (readers working in parallel finish out of order); any other
        jumps, breaking it. The first read of a pack near its start, while streaming,
        counts too. The PROMOTE_AFTER-th jump of readers waiting for their bytes (a shuffle
        coming back to the pack) has it promoted; reads ahead follow an order known in
        advance and fetch what it needs, so their jumps do not count."""
        with self._lock:
            end, streak, jumps = self._streaks.pop(slot.pack_id, (None, 0, 0))
            jumped = False
            near_start = slot.offset <= AHEAD * slot.length
            if end is None:
                end, streak = slot.offset + slot.length, STREAK if near_start and self._streaming else 0
            elif 0 <= slot.offset - end <= AHEAD * slot.length:
                end, streak = slot.offset + slot.length, streak + 1
            elif not -BEHIND * slot.length <= slot.offset - end < 0:
                end, streak, jumped = slot.offset + slot.length, 0, demand
                jumps += jumped
            if streak < STREAK:
                self._streaming = False
            self._streaks[slot.pack_id] = (end, streak, jumps)
            if len(self._streaks) > TRACKED_PACKS:
                self._streaks.popitem(last=False)
        if jumped and jumps == PROMOTE_AFTER and self._sink is not None:
            self._background.submit(self._guessed, self._promote, slot.pack_id)
        return streak >= STREAK

    def on_promoted(self, sink: PromotionSink) -> None:
        self._sink = sink

    def _promote(self, pack_id: int) -> None:
        """Fetch a pack whole and hand its members that still live in it to the sink."""
        record = self.index.pack_record(pack_id)
        data = None if record is None else self.inner.get_range(pack_id, 0, record.size)
        if record is None or data is None or self._sink is None:
            return
        live = [m for m in record.members if self.index.slot_of(m.block_id) == PackSlot(pack_id, m.offset, m.length)]
        self._sink([(m.block_id, data[m.offset:m.offset + m.length], m.checksum) for m in live])

    def _follow(self, pack_id: int) -> None:
        """Fetch the PACKS_AHEAD packs after `pack_id` whole, each on its own thread, those
        not held or on their way already; while they fit in half the budget."""
        ahead = pack_id
        for _ in range(PACKS_AHEAD):
            ahead = self.index.next_pack(ahead)
            record = None if ahead is None else self.index.pack_record(ahead)
            if record is None or record.size * PACKS_AHEAD > HELD_BYTES // 2:
                return
            with self._lock:
                wanted = ahead not in self._held and ahead not in self._fetching
            if wanted:
                self._background.submit(self._guessed, self._fetch, ahead, 0, record)

    @staticmethod
    def _guessed(work: Callable[..., None], *args: Any) -> None:
        """Run work ahead of the reads: only a guess at what comes next, so a failure here is
        left to the reads it was for, which report it."""
        try:
            work(*args)
        except Exception as err:  # noqa: BLE001 - speculative; the demand read reports failures
            log.debug("fetching packs ahead of their reads failed: %s", err)

    def _fetch(self, pack_id: int, start: int, record: PackRecord | None = None) -> None:
        """Fetch the pack from `start` to its end in one request and hold the bytes; nothing
        when they are held already, being fetched, or the pack is not recorded."""
        record = record or self.index.pack_record(pack_id)
        with self._lock:
            if record is None or pack_id in self._fetching or pack_id in self._held:
                return
            done = self._fetching[pack_id] = threading.Event()
        try:
            data = self.inner.get_range(pack_id, start, record.size - start)
            with self._lock:
                self._streaming = data is not None
                if data is not None:
                    self.fetched_ahead += 1
                    slots = {m.block_id: PackSlot(pack_id, m.offset, m.length)
                             for m in record.members if m.offset >= start}
                    self._hold(pack_id, _Held(start, data, list(slots)), slots)
        finally:
            with self._lock:
                del self._fetching[pack_id]
            done.set()

    def _hold(self, pack_id: int, held: _Held, slots: dict[int, PackSlot]) -> None:
        """Keep fetched pack bytes and where its members are in them, dropping the oldest
        beyond the budget (the caller holds the lock)."""
        self._held_bytes += len(held.data)
        self._held[pack_id] = held
        self._held_slots.update(slots)
        while self._held_bytes > HELD_BYTES and len(self._held) > 1:
            self._drop(next(iter(self._held)))

    def _drop(self, pack_id: int) -> None:
        """Forget a pack's held bytes, if held (the caller holds the lock)."""
        dropped = self._held.pop(pack_id, None)
        if dropped is not None:
            self._held_bytes -= len(dropped.data)
            for block_id in dropped.members:
                self._held_slots.pop(block_id, None)

    # -- the rest of the ColdTier protocol -------------------------------------------------

    def put(self, block_id: int, data: bytes) -> None:
        self.inner.put(block_id, data)

    def flush(self) -> None:
        self.inner.flush()

    def delete(self, block_id: int) -> None:
        self.inner.delete(block_id)

    def delete_many(self, block_ids: list[int]) -> None:
        with self._lock:
            for block_id in block_ids:  # a pack being deleted: its bytes are garbage
                self._drop(block_id)
        self.inner.delete_many(block_ids)

    def contains(self, block_id: int) -> bool:
        slot = self.index.slot_of(block_id)
        return self.inner.contains(block_id if slot is None else slot.pack_id)

    def used(self) -> int:
        return self.inner.used()

    def close(self) -> None:
        self._background.shutdown(wait=False, cancel_futures=True)
        self.inner.close()

    def url(self, block_id: int | None = None) -> str:
        return self.inner.url(block_id)

    def block_ids(self) -> list[int]:
        """The blocks the tier holds: objects stored on their own, and the members of each
        recorded pack that is stored (fsck's view: a pack is not a block of any file)."""
        stored = set(self.inner.block_ids())
        packs = self.index.pack_ids()
        members = [b for b, slot in self.index.packed_blocks().items() if slot.pack_id in stored]
        return [b for b in stored if b not in packs] + members

    def block_sizes(self) -> dict[int, int]:
        """Every object stored, packs too, with its size (gc)."""
        return self.inner.block_sizes()
