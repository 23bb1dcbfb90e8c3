"""Volume-wide totals (inodes, bytes held by blocks) that statfs reports.

Kept in memory and written in the same batch as every change to them, so the
stored totals always agree with the namespace.
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
        self.inodes += inodes
        self.bytes += nbytes
        batch.put(_KEY, msgpack.packb((self.inodes, self.bytes)))
