"""The repairs fsck can make. Each is one atomic metadata batch (or one object deletion),
so a repair run that is interrupted leaves a volume that the next run can finish."""

import errno
import stat

from aifs.errors import FsError
from aifs.fsck.tiers import HeldBlocks
from aifs.meta import MetaEngine, blockmap, keys
from aifs.meta.attrs import BlockRef
from aifs.meta.engine import ROOT_INO
from aifs.meta.kv import Batch, KVStore
from aifs.meta.txn import Txn

LOST_FOUND = b"lost+found"


def delete_keys(kv: KVStore, *doomed: bytes) -> None:
    batch = Batch()
    for key in doomed:
        batch.delete(key)
    kv.commit(batch)


def delete_prefix(kv: KVStore, prefix: bytes) -> None:
    """Delete every key of one owner and tag (all block refs or xattrs of a missing inode)."""
    delete_keys(kv, *(key for key, _ in kv.scan(prefix)))


def queue_upload(kv: KVStore, ref: BlockRef) -> None:
    batch = Batch()
    blockmap.queue_upload(batch, ref)
    kv.commit(batch)


def put_key(kv: KVStore, key: bytes, value: bytes = b"") -> None:
    batch = Batch()
    batch.put(key, value)
    kv.commit(batch)


def set_inode(meta: MetaEngine, ino: int, **fields: int) -> None:
    """Correct fields of an inode (nlink, parent, alloc) without touching its times."""
    txn = Txn(meta.kv)
    node = txn.inode(ino)
    for name, value in fields.items():
        setattr(node, name, value)
    txn.changed(ino)
    txn.commit()


def set_usage(meta: MetaEngine, inodes: int, nbytes: int) -> None:
    """Move the statfs counters to the totals fsck counted."""
    batch = Batch()
    meta.usage.add(batch, inodes=inodes - meta.usage.inodes, nbytes=nbytes - meta.usage.bytes)
    meta.kv.commit(batch)


def delete_object(tiers: tuple[HeldBlocks, ...], block_id: int) -> None:
    for tier in tiers:
        tier.delete(block_id)


class LostFound:
    """`/lost+found`, made on first use, where inodes that lost every name are linked as `#ino`."""

    def __init__(self, meta: MetaEngine) -> None:
        self.meta = meta
        self._ino: int | None = None

    def _home(self) -> int:
        if self._ino is None:
            found = self._find()
            self._ino = found or self.meta.create(ROOT_INO, LOST_FOUND, stat.S_IFDIR | 0o700, 0, 0)[0]
        return self._ino

    def _find(self) -> int | None:
        try:
            ino, node = self.meta.lookup(ROOT_INO, LOST_FOUND)
        except FsError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, "/lost+found is not a directory; rename it and repair again")
        return ino

    def adopt(self, ino: int, cut: tuple[int, bytes] | None = None) -> None:
        """Link `ino` into lost+found; a directory on a loop first loses its entry `cut` there."""
        home = self._home()
        txn = Txn(self.meta.kv)
        node = txn.inode(ino)
        if cut is not None:
            txn.unlink_entry(*cut)
            txn.touch(cut[0]).nlink -= 1
        txn.link_entry(home, b"#%d" % ino, ino)
        home_node = txn.touch(home)
        if node.is_dir:
            node.parent = home
            home_node.nlink += 1
        else:
            node.nlink = 1
        txn.changed(ino)
        txn.batch.delete(keys.orphan(ino))
        txn.commit()
