"""Inode numbers and block ids, handed out from ranges reserved with an atomic counter.

Reserving a range costs one increment per `chunk` ids instead of one per id; nodes that
share the store each reserve their own ranges, so no id is ever handed out twice. A crash
loses at most the unused rest of a range.
"""

from aifs.meta import keys
from aifs.meta.kv import KVStore


class IdAllocator:
    def __init__(self, kv: KVStore, name: bytes, first: int, chunk: int = 4096) -> None:
        self._kv = kv
        self._key = keys.counter(name)
        self._first = first
        self._chunk = chunk
        self._next = self._limit = 0

    def next(self) -> int:
        """The next id. None is handed out while the store cannot record what it would name
        (MetaWriteFailed): a writer stages no block that no commit could refer to."""
        self._kv.check_writable()
        while self._next >= self._limit:
            limit = self._kv.add(self._key, self._chunk)  # this node now owns [limit - chunk, limit)
            self._next, self._limit = max(limit - self._chunk, self._first), limit
        value = self._next
        self._next += 1
        return value
