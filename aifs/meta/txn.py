"""One namespace transaction: reads, checks, then a single atomic batch under its read set."""

import errno
import functools
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from aifs.meta import keys
from aifs.meta.attrs import FROZEN, Inode
from aifs.errors import FsError
from aifs.meta.kv import Batch, Conflict, KVStore

log = logging.getLogger(__name__)

_ATTEMPTS = 50
P = ParamSpec("P")
R = TypeVar("R")


class Txn:
    """Collects the inodes an operation touches so each is read once and written once.

    Every read goes into the batch's read set: the commit succeeds only if nothing the
    operation based its decision on changed meanwhile (on another node, say)."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv
        self.batch = Batch()
        self.now = time.time_ns()
        self._inodes: dict[int, Inode] = {}
        self._dirty: set[int] = set()

    def get(self, key: bytes) -> bytes | None:
        value = self.kv.get(key)
        self.batch.expect(key, value)
        return value

    def multi_get(self, keys_: list[bytes]) -> list[bytes | None]:
        values = self.kv.multi_get(keys_)
        for key, value in zip(keys_, values):
            self.batch.expect(key, value)
        return values

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys under `prefix`, each one part of the read set. Keys added to the range later
        are caught by the owner inode, which every such addition rewrites."""
        for key, value in self.kv.scan(prefix, start):
            self.batch.expect(key, value)
            yield key, value

    def is_empty(self, prefix: bytes) -> bool:
        """Whether no key starts with `prefix`; if so, the commit requires it still to be."""
        if next(self.kv.scan(prefix), None) is not None:
            return False
        self.batch.expect_empty(prefix)
        return True

    def inode(self, ino: int) -> Inode:
        if ino not in self._inodes:
            data = self.get(keys.inode(ino))
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
        data = self.get(keys.dentry(parent, name))
        return None if data is None else keys.read_u64(data)

    def add(self, ino: int, node: Inode) -> None:
        self._inodes[ino] = node
        self._dirty.add(ino)

    def touch(self, ino: int, *, mtime: bool = True) -> Inode:
        """Mark an inode changed now (ctime, and mtime unless told otherwise)."""
        node = self.inode(ino)
        self.changed(ino)
        node.ctime_ns = self.now
        if mtime:
            node.mtime_ns = self.now
        return node

    def changed(self, ino: int) -> None:
        """Every change of an inode passes here: a frozen one refuses it (EROFS)."""
        if self.inode(ino).frozen:
            raise FsError(errno.EROFS, f"inode {ino} is in a frozen tree; `aifs thaw` it to change it")
        self._dirty.add(ino)

    def set_frozen(self, ino: int, frozen: bool) -> None:
        node = self.inode(ino)
        node.flags = node.flags | FROZEN if frozen else node.flags & ~FROZEN
        self._dirty.add(ino)

    def forget(self, ino: int) -> None:
        self._inodes.pop(ino, None)
        self._dirty.discard(ino)

    def link_entry(self, parent: int, name: bytes, ino: int) -> None:
        self.batch.put(keys.dentry(parent, name), keys.entry(ino, self.inode(ino).mode))

    def unlink_entry(self, parent: int, name: bytes) -> None:
        self.batch.delete(keys.dentry(parent, name))

    def commit(self) -> None:
        for ino in self._dirty:
            self.batch.put(keys.inode(ino), self._inodes[ino].encode())
        self.kv.commit(self.batch)


def retried(operation: Callable[P, R]) -> Callable[P, R]:
    """Run a namespace operation again, on fresh reads, when its commit meets a Conflict.

    Conflicts come from other nodes changing the same inodes at once; a short random pause
    keeps two nodes from meeting again in lockstep."""

    @functools.wraps(operation)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(_ATTEMPTS):
            try:
                return operation(*args, **kwargs)
            except Conflict:
                time.sleep(random.uniform(0, 0.0002 * min(attempt + 1, 20)))
        log.error("%s gave up after %d conflicting attempts", operation.__name__, _ATTEMPTS)
        raise FsError(errno.EIO, f"{operation.__name__} kept conflicting with other nodes' changes")

    return run
