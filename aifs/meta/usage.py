"""Volume-wide totals (inodes, bytes held by blocks) that statfs reports.

Two counters in the store, moved by atomic increments in the same batch as every change
to them, so the totals agree with the namespace however many nodes change it.
"""

import msgpack

from aifs.meta import keys
from aifs.meta.kv import Batch, KVStore
from aifs.meta.txn import Txn, retried

INODES = keys.counter(b"usage.inodes")
BYTES = keys.counter(b"usage.bytes")
_OLD_TOTALS = keys.counter(b"usage")  # one msgpack pair, as single-node volumes kept it


class Usage:
    def __init__(self, kv: KVStore) -> None:
        self._kv = kv
        self._adopt_old_totals()

    @retried
    def _adopt_old_totals(self) -> None:
        """A volume that kept both totals in one value moves them into the two counters, once
        (two nodes opening it at once: the second finds them moved)."""
        if self._kv.get(_OLD_TOTALS) is None or not self._kv.writable():
            return
        txn = Txn(self._kv)
        stored = txn.get(_OLD_TOTALS)
        if stored is None:
            return
        inodes, nbytes = msgpack.unpackb(stored)
        txn.batch.delete(_OLD_TOTALS)
        txn.batch.add(INODES, inodes)
        txn.batch.add(BYTES, nbytes)
        txn.commit()

    @staticmethod
    def add(batch: Batch, inodes: int = 0, nbytes: int = 0) -> None:
        """Stage a change of the totals in `batch`."""
        if inodes:
            batch.add(INODES, inodes)
        if nbytes:
            batch.add(BYTES, nbytes)

    @property
    def inodes(self) -> int:
        return self._kv.counter(INODES)

    @property
    def bytes(self) -> int:
        return self._kv.counter(BYTES)
