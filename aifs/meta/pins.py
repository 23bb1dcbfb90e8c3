"""Pinned files (`P ino -> tier name`): kept in the metadata so pins survive restarts.

The metadata only records which file is pinned to which tier; keeping the blocks
there is the job of the layers above (meta knows nothing of tiers).
"""

from aifs.meta import keys
from aifs.meta.kv import Batch
from aifs.meta.txn import Txn, retried


class PinOps:
    """Mixed into MetaEngine; needs `kv`."""

    def pins(self) -> dict[int, str]:
        """Every pinned inode and the tier it is pinned to."""
        return {keys.read_u64(k, 1): v.decode() for k, v in self.kv.scan(keys.PIN)}

    @retried
    def set_pin(self, ino: int, tier: str) -> None:
        """Pin a file that exists: the pin commits only while its inode does, so a pin never
        outlives a file another node removed meanwhile."""
        txn = Txn(self.kv)
        txn.inode(ino)
        txn.batch.put(keys.pin(ino), tier.encode())
        txn.commit()

    def clear_pin(self, ino: int) -> None:
        batch = Batch()
        batch.delete(keys.pin(ino))
        self.kv.commit(batch)
