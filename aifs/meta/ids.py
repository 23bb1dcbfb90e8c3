"""Inode numbers and block ids, handed out from ranges reserved in the store.

Reserving a range costs one write per `chunk` ids instead of one per id; a crash
loses at most the unused rest of a range, never hands an id out twice.
"""

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore


class IdAllocator:
    def __init__(self, kv: KVStore, name: bytes, first: int, chunk: int = 4096) -> None:
        self._kv = kv
        self._key = keys.counter(name)
        self._chunk = chunk
        stored = kv.get(self._key)
        self._next = keys.read_u64(stored) if stored else first
        self._limit = self._next

    def next(self) -> int:
        """The next id. None is handed out while the store cannot record what it would name
        (MetaWriteFailed): a writer stages no block that no commit could refer to."""
        self._kv.check_writable()
        if self._next >= self._limit:
            limit = self._next + self._chunk
            batch = Batch()
            batch.put(self._key, keys.u64(limit))
            self._kv.commit(batch)
            self._limit = limit
        value = self._next
        self._next += 1
        return value
