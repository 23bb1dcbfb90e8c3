"""One namespace transaction: reads, checks, then a single atomic batch."""

import errno
import time

from aifs.meta import keys
from aifs.meta.attrs import Inode
from aifs.errors import FsError
from aifs.meta.kv import Batch, KVStore


class Txn:
    """Collects the inodes an operation touches so each is read once and written once."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv
        self.batch = Batch()
        self.now = time.time_ns()
        self._inodes: dict[int, Inode] = {}
        self._dirty: set[int] = set()

    def inode(self, ino: int) -> Inode:
        if ino not in self._inodes:
            data = self.kv.get(keys.inode(ino))
            if data is None:
                raise FsError(errno.ENOENT, f"inode {ino} does not exist")
            self._inodes[ino] = Inode.decode(data)
        return self._inodes[ino]

    def directory(self, ino: int) -> Inode:
        node = self.inode(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        return node

    def dentry(self, parent: int, name: bytes) -> int | None:
        data = self.kv.get(keys.dentry(parent, name))
        return None if data is None else keys.read_u64(data)

    def add(self, ino: int, node: Inode) -> None:
        self._inodes[ino] = node
        self._dirty.add(ino)

    def touch(self, ino: int, *, mtime: bool = True) -> Inode:
        """Mark an inode changed now (ctime, and mtime unless told otherwise)."""
        node = self.inode(ino)
        node.ctime_ns = self.now
        if mtime:
            node.mtime_ns = self.now
        self._dirty.add(ino)
        return node

    def changed(self, ino: int) -> None:
        self._dirty.add(ino)

    def forget(self, ino: int) -> None:
        self._inodes.pop(ino, None)
        self._dirty.discard(ino)

    def link_entry(self, parent: int, name: bytes, ino: int) -> None:
        self.batch.put(keys.dentry(parent, name), keys.u64(ino))

    def unlink_entry(self, parent: int, name: bytes) -> None:
        self.batch.delete(keys.dentry(parent, name))

    def commit(self) -> None:
        for ino in self._dirty:
            self.batch.put(keys.inode(ino), self._inodes[ino].encode())
        self.kv.commit(self.batch)
