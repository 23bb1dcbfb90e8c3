"""Volume-wide totals (inodes, bytes held by blocks) that statfs reports.

Kept in memory and written in the same batch as every change to them; the memory copy
moves only once that batch commits, so the totals always agree with the namespace.
"""

import msgpack

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore

_KEY = keys.counter(b"usage")


class Usage:
    def __init__(self, kv: KVStore) -> None:
        stored = kv.get(_KEY)
        self.inodes, self.bytes = msgpack.unpackb(stored) if stored else (0, 0)

    def add(self, batch: Batch, inodes: int = 0, nbytes: int = 0) -> None:
        """Stage a change of the totals in `batch`, on top of what it already staged."""
        staged = batch.ops.get(_KEY)
        before = msgpack.unpackb(staged) if staged is not None else (self.inodes, self.bytes)
        totals = (before[0] + inodes, before[1] + nbytes)
        batch.put(_KEY, msgpack.packb(totals))
        batch.on_commit(lambda: self._set(totals))

    def _set(self, totals: tuple[int, int]) -> None:
        self.inodes, self.bytes = totals
