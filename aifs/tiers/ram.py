"""RAM tier: a byte-budgeted segmented LRU.

New blocks enter a probation segment; a second hit moves them to a protected
segment. Eviction takes from probation first, so a one-pass scan larger than the
budget cannot flush out blocks that are read again and again.

Pinned blocks sit apart from both segments and are never evicted; they count
against the budget, so the cache shrinks around them.
"""

from collections import OrderedDict

PROTECTED_SHARE = 0.8


class _Segment:
    """An LRU list of blocks that knows how many bytes it holds."""

    def __init__(self) -> None:
        self.blocks: OrderedDict[int, bytes] = OrderedDict()
        self.bytes = 0

    def add(self, block_id: int, data: bytes) -> None:
        self.blocks[block_id] = data
        self.bytes += len(data)

    def pop(self, block_id: int) -> bytes | None:
        data = self.blocks.pop(block_id, None)
        if data is not None:
            self.bytes -= len(data)
        return data

    def pop_oldest(self) -> tuple[int, bytes]:
        block_id, data = self.blocks.popitem(last=False)
        self.bytes -= len(data)
        return block_id, data


class RamTier:
    name = "ram"

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._probation = _Segment()
        self._protected = _Segment()
        self._pinned = _Segment()
        self._pin_ids: set[int] = set()

    def get(self, block_id: int, promote: bool = True) -> bytes | None:
        """A hit; with `promote` a block on probation counts as re-used and is protected."""
        data = self._pinned.blocks.get(block_id)
        if data is not None:
            return data
        data = self._protected.blocks.get(block_id)
        if data is not None:
            self._protected.blocks.move_to_end(block_id)
            return data
        data = self._probation.blocks.get(block_id)
        if data is None:
            return None
        if promote:
            self._probation.pop(block_id)
            self._protect(block_id, data)
        else:
            self._probation.blocks.move_to_end(block_id)
        return data

    def _protect(self, block_id: int, data: bytes) -> None:
        self._protected.add(block_id, data)
        limit = int((self.capacity - self._pinned.bytes) * PROTECTED_SHARE)
        while self._protected.bytes > limit and len(self._protected.blocks) > 1:
            self._probation.add(*self._protected.pop_oldest())
        self._evict()

    def put(self, block_id: int, data: bytes) -> None:
        if len(data) > self.capacity or self.contains(block_id):
            return
        if block_id in self._pin_ids and self._pinned.bytes + len(data) <= self.capacity:
            self._pinned.add(block_id, data)
        else:
            self._probation.add(block_id, data)
        self._evict()

    def pin(self, block_ids: list[int]) -> None:
        """Keep these blocks once they are here (those already here move at once)."""
        for block_id in block_ids:
            self._pin_ids.add(block_id)
            data = self._probation.pop(block_id)
            if data is None:
                data = self._protected.pop(block_id)
            if data is not None:
                self._pinned.add(block_id, data)

    def unpin(self, block_ids: list[int]) -> None:
        """Let these blocks be evicted again; they restart on probation."""
        for block_id in block_ids:
            self._pin_ids.discard(block_id)
            data = self._pinned.pop(block_id)
            if data is not None:
                self._probation.add(block_id, data)
        self._evict()

    def release(self, block_id: int) -> None:
        """A block a stream has read through once leaves probation, so that its memory
        serves the next block read; one re-used or pinned meanwhile stays."""
        self._probation.pop(block_id)

    def is_pinned(self, block_id: int) -> bool:
        return block_id in self._pin_ids

    def pinned_bytes(self) -> int:
        """Bytes of pinned blocks held now."""
        return self._pinned.bytes

    def _evict(self) -> None:
        for segment in (self._probation, self._protected):
            while self.used() > self.capacity and segment.blocks:
                segment.pop_oldest()

    def delete(self, block_id: int) -> None:
        """A retired block: its id is never used again, so its pin goes with it."""
        self._probation.pop(block_id)
        self._protected.pop(block_id)
        self._pinned.pop(block_id)
        self._pin_ids.discard(block_id)

    def contains(self, block_id: int) -> bool:
        return any(block_id in s.blocks for s in (self._pinned, self._protected, self._probation))

    def used(self) -> int:
        return self._probation.bytes + self._protected.bytes + self._pinned.bytes
