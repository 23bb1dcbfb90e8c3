"""MetaEngine: every namespace operation as one transaction over the sharded KV.

Each method reads what it needs with point gets, checks POSIX rules, and commits
one atomic batch, so a crash leaves either the old or the new namespace.
"""

import errno
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack

from aifs.meta import contents, keys
from aifs.meta.attrs import Inode
from aifs.meta.blockmap import DEFAULT_GRACE_NS, BlockMapOps
from aifs.errors import FsError
from aifs.meta.ids import IdAllocator
from aifs.meta.kv import KVStore
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.meta.names import NAME_MAX, check_name
from aifs.meta.packs import PackOps
from aifs.meta.pins import PinOps
from aifs.meta.txn import Txn, retried
from aifs.meta.usage import Usage
from aifs.meta.writestate import MetaWriteFailed
from aifs.meta.xattrs import XattrOps

ROOT_INO = 1
FORMAT_VERSION = 1
DIR_SIZE = 4096

IsOpen = Callable[[int], bool]


class MetaEngine(BlockMapOps, PackOps, XattrOps, PinOps):
    """The namespace of one volume; callers pass in whether an inode is open (for orphans).

    On a shared engine `node` names this node in the records it owns (staged uploads), and
    an inode open on any node (a holder key, aifs.meta.sessions) survives its last unlink."""

    def __init__(self, kv: KVStore, block_size: int, garbage_grace_ns: int = DEFAULT_GRACE_NS,
                 node: bytes = b"") -> None:
        self.kv = kv
        self.node = node
        self.garbage_grace_ns = garbage_grace_ns
        self.volume = self._load_or_format(block_size)
        self.block_size: int = self.volume["block_size"]
        self.usage = Usage(kv)
        self._inos = IdAllocator(kv, b"next_ino", ROOT_INO + 1)
        self.block_ids = IdAllocator(kv, b"next_block", 1)

    @classmethod
    def open(
        cls, path: Path, shards: int, block_size: int, garbage_grace_ns: int = DEFAULT_GRACE_NS,
    ) -> "MetaEngine":
        path.mkdir(parents=True, exist_ok=True)
        return cls(ShardedRocksKV(path, shards), block_size, garbage_grace_ns)

    def close(self) -> None:
        self.kv.close()

    def sync(self) -> None:
        self.kv.sync()

    def check_writable(self) -> None:
        """Raise MetaWriteFailed while the store cannot take changes (it may reopen here)."""
        self.kv.check_writable()

    def writable(self) -> bool:
        return self.kv.writable()

    def _load_or_format(self, block_size: int) -> dict:
        stored = self.kv.get_fresh(keys.VOLUME)
        if stored is not None:
            return msgpack.unpackb(stored)
        if not contents.is_empty(self.kv):
            raise MetaWriteFailed(errno.EIO, "the metadata engine holds keys but no volume record (a load "
                                             "that never finished?); empty it, or load the dump again")
        return self._format(block_size)

    @retried
    def _format(self, block_size: int) -> dict:
        """Create the volume; when another node formats it first, join theirs."""
        volume = {"uuid": str(uuid.uuid4()), "block_size": block_size, "format": FORMAT_VERSION}
        txn = Txn(self.kv)
        stored = txn.get(keys.VOLUME)
        if stored is not None:
            return msgpack.unpackb(stored)
        root = Inode(stat.S_IFDIR | 0o755, 0, 0, size=DIR_SIZE, nlink=2, parent=ROOT_INO)
        root.atime_ns = root.mtime_ns = root.ctime_ns = txn.now
        txn.add(ROOT_INO, root)
        txn.batch.put(keys.VOLUME, msgpack.packb(volume))
        Usage.add(txn.batch, inodes=1)
        txn.commit()
        self.kv.sync()
        return volume

    # -- reads -------------------------------------------------------------

    def getattr(self, ino: int, fresh: bool = False) -> Inode:
        """Attributes; `fresh` asks the engine itself, past any node-local cache (an open)."""
        data = (self.kv.get_fresh if fresh else self.kv.get)(keys.inode(ino))
        if data is None:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist")
        return Inode.decode(data)

    def getattrs(self, inos: list[int]) -> list[Inode | None]:
        """Attributes of many inodes in one engine round trip; None for an inode that is gone."""
        found = self.kv.multi_get([keys.inode(ino) for ino in inos])
        return [None if data is None else Inode.decode(data) for data in found]

    def lookup(self, parent: int, name: bytes) -> tuple[int, Inode]:
        txn = Txn(self.kv)
        node = txn.directory(parent)
        if name == b".":
            return parent, node
        if name == b"..":
            return node.parent, txn.inode(node.parent)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes exceeds {NAME_MAX}")
        ino = self._existing(txn, parent, name)
        return ino, txn.inode(ino)

    def readdir(self, parent: int, after: bytes | None = None) -> Iterator[tuple[bytes, int]]:
        """Entries of a directory in name order, resuming strictly after `after`."""
        for name, ino, _ in self.listing(parent, after):
            yield name, ino

    def listing(self, parent: int, after: bytes | None = None) -> Iterator[tuple[bytes, int, int | None]]:
        """`readdir` with each entry's file type (S_IFMT bits), None where the entry does not record it."""
        prefix = keys.dentry_prefix(parent)
        start = None if after is None else prefix + after + b"\0"
        skip, read_entry = len(prefix), keys.read_entry
        for key, value in self.kv.scan(prefix, start):
            ino, kind = read_entry(value)
            yield key[skip:], ino, kind

    def readlink(self, ino: int) -> bytes:
        target = self.kv.get(keys.symlink(ino))
        if target is None:
            raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")
        return target

    # -- creation ----------------------------------------------------------

    @retried
    def create(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int,
        rdev: int = 0, target: bytes | None = None,
    ) -> tuple[int, Inode]:
        """Make a new inode of any type (file, dir, node, symlink) under `parent`."""
        check_name(name)
        txn = Txn(self.kv)
        pnode = txn.directory(parent)
        if txn.dentry(parent, name) is not None:
            raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
        if pnode.nlink == 0:
            raise FsError(errno.ENOENT, f"directory {parent} was removed")
        if pnode.mode & stat.S_ISGID:
            gid = pnode.gid
            if stat.S_ISDIR(mode):
                mode |= stat.S_ISGID
        node = Inode(mode, uid, gid, rdev=rdev)
        node.atime_ns = node.mtime_ns = node.ctime_ns = txn.now
        ino = self._inos.next()
        if stat.S_ISDIR(mode):
            node.nlink, node.size, node.parent = 2, DIR_SIZE, parent
            pnode.nlink += 1
        elif target is not None:
            node.size = len(target)
            txn.batch.put(keys.symlink(ino), target)
        txn.add(ino, node)
        txn.touch(parent)
        txn.link_entry(parent, name, ino)
        self.usage.add(txn.batch, inodes=1)
        txn.commit()
        return ino, node

    @retried
    def link(self, ino: int, parent: int, name: bytes) -> Inode:
        check_name(name)
        txn = Txn(self.kv)
        txn.directory(parent)
        node = txn.inode(ino)
        if node.is_dir:
            raise FsError(errno.EPERM, "hard links to directories are not allowed")
        if txn.dentry(parent, name) is not None:
            raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
        if node.nlink == 0:
            raise FsError(errno.ENOENT, f"inode {ino} was unlinked")
        node.nlink += 1
        txn.touch(ino, mtime=False)
        txn.touch(parent)
        txn.link_entry(parent, name, ino)
        txn.commit()
        return node

    # -- removal -----------------------------------------------------------

    @retried
    def unlink(self, parent: int, name: bytes, is_open: IsOpen) -> int:
        txn = Txn(self.kv)
        ino = self._existing(txn, parent, name)
        if txn.inode(ino).is_dir:
            raise FsError(errno.EISDIR, f"{name!r} is a directory")
        txn.unlink_entry(parent, name)
        txn.touch(parent)
        self._drop_link(txn, ino, is_open)
        txn.commit()
        return ino

    @retried
    def rmdir(self, parent: int, name: bytes) -> int:
        if name == b".":
            raise FsError(errno.EINVAL, "cannot remove '.'")
        if name == b"..":
            raise FsError(errno.ENOTEMPTY, "cannot remove '..'")
        txn = Txn(self.kv)
        ino = self._existing(txn, parent, name)
        self._check_empty_dir(txn, ino, name)
        txn.unlink_entry(parent, name)
        txn.touch(parent).nlink -= 1
        self._drop_link(txn, ino, lambda _: False)
        txn.commit()
        return ino

    def _existing(self, txn: Txn, parent: int, name: bytes) -> int:
        txn.directory(parent)
        ino = txn.dentry(parent, name)
        if ino is None:
            raise FsError(errno.ENOENT, f"no entry {name!r} in directory {parent}")
        return ino

    def _check_empty_dir(self, txn: Txn, ino: int, name: bytes) -> None:
        if not txn.inode(ino).is_dir:
            raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
        if not txn.is_empty(keys.dentry_prefix(ino)):
            raise FsError(errno.ENOTEMPTY, f"directory {name!r} is not empty")

    def _drop_link(self, txn: Txn, ino: int, is_open: IsOpen) -> None:
        """One name of `ino` is gone: free it, or keep it as an orphan while it is open."""
        node = txn.touch(ino, mtime=False)
        node.nlink = 0 if node.is_dir else node.nlink - 1
        if node.nlink > 0:
            return
        if not node.is_dir and (is_open(ino) or self._held(txn, ino)):
            txn.batch.put(keys.orphan(ino), b"")
            return
        self._free_inode(txn, ino, node)

    def _held(self, txn: Txn, ino: int) -> bool:
        """Whether a session of a shared volume has the inode open (on any node)."""
        return self.kv.shared and not txn.is_empty(keys.holder_prefix(ino))

    def _free_inode(self, txn: Txn, ino: int, node: Inode) -> None:
        txn.forget(ino)
        txn.batch.delete(keys.inode(ino))
        txn.batch.delete(keys.symlink(ino))
        txn.batch.delete(keys.orphan(ino))
        txn.batch.delete(keys.pin(ino))
        txn.batch.delete(keys.locks(ino))
        for key, _ in txn.scan(keys.xattr_prefix(ino)):
            txn.batch.delete(key)
        self.retire_blocks(txn, ino, 0)
        self.usage.add(txn.batch, inodes=-1, nbytes=-node.alloc)

    def orphans(self) -> list[int]:
        return [keys.read_u64(k, 1) for k, _ in self.kv.scan(keys.ORPHAN)]

    @retried
    def reclaim(self, ino: int) -> None:
        """Free an orphan after its last close (or at mount, after a crash); one that a
        session of a shared volume still holds open stays."""
        txn = Txn(self.kv)
        try:
            node = txn.inode(ino)
        except FsError:
            node = None
        if node is None or node.nlink > 0:
            txn.batch.delete(keys.orphan(ino))
        elif self._held(txn, ino):
            return
        else:
            self._free_inode(txn, ino, node)
        txn.commit()

    # -- rename ------------------------------------------------------------

    @retried
    def rename(
        self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes,
        flags: int, is_open: IsOpen,
    ) -> None:
        """rename(2) with RENAME_NOREPLACE (1) and RENAME_EXCHANGE (2)."""
        check_name(new_name)
        if flags & 1 and flags & 2:
            raise FsError(errno.EINVAL, "RENAME_NOREPLACE and RENAME_EXCHANGE exclude each other")
        txn = Txn(self.kv)
        src = self._existing(txn, old_parent, old_name)
        txn.directory(new_parent)
        dst = txn.dentry(new_parent, new_name)
        if flags & 1 and dst is not None:
            raise FsError(errno.EEXIST, f"{new_name!r} exists and RENAME_NOREPLACE was given")
        if flags & 2:
            self._exchange(txn, (old_parent, old_name, src), (new_parent, new_name, dst))
        elif src != dst:
            self._move(txn, (old_parent, old_name, src), (new_parent, new_name, dst), is_open)
        txn.commit()

    def _move(self, txn: Txn, source: tuple, target: tuple, is_open: IsOpen) -> None:
        old_parent, old_name, src = source
        new_parent, new_name, dst = target
        src_node = txn.inode(src)
        if dst is not None:
            self._check_replace(txn, src_node, dst, new_name)
        if src_node.is_dir:
            self._check_not_ancestor(txn, src, new_parent)
        txn.unlink_entry(old_parent, old_name)
        txn.link_entry(new_parent, new_name, src)
        txn.touch(src, mtime=False)
        txn.touch(old_parent)
        txn.touch(new_parent)
        if dst is not None:
            if txn.inode(dst).is_dir:
                txn.inode(new_parent).nlink -= 1
            self._drop_link(txn, dst, is_open)
        if src_node.is_dir and old_parent != new_parent:
            self._reparent(txn, src, old_parent, new_parent)

    def _exchange(self, txn: Txn, first: tuple, second: tuple) -> None:
        (p1, n1, a), (p2, n2, b) = first, second
        if b is None:
            raise FsError(errno.ENOENT, f"{n2!r} does not exist for RENAME_EXCHANGE")
        if txn.inode(a).is_dir:
            self._check_not_ancestor(txn, a, p2)
        if txn.inode(b).is_dir:
            self._check_not_ancestor(txn, b, p1)
        txn.link_entry(p1, n1, b)
        txn.link_entry(p2, n2, a)
        for ino in {a, b}:
            txn.touch(ino, mtime=False)
        for parent in {p1, p2}:
            txn.touch(parent)
        if p1 != p2:
            if txn.inode(a).is_dir:
                self._reparent(txn, a, p1, p2)
            if txn.inode(b).is_dir:
                self._reparent(txn, b, p2, p1)

    def _check_replace(self, txn: Txn, src_node: Inode, dst: int, new_name: bytes) -> None:
        dst_node = txn.inode(dst)
        if src_node.is_dir and not dst_node.is_dir:
            raise FsError(errno.ENOTDIR, f"cannot replace non-directory {new_name!r} with a directory")
        if dst_node.is_dir and not src_node.is_dir:
            raise FsError(errno.EISDIR, f"cannot replace directory {new_name!r} with a non-directory")
        if dst_node.is_dir:
            self._check_empty_dir(txn, dst, new_name)

    def _check_not_ancestor(self, txn: Txn, directory: int, target_parent: int) -> None:
        """EINVAL when `target_parent` is `directory` or lies inside it."""
        ino = target_parent
        while True:
            if ino == directory:
                raise FsError(errno.EINVAL, "cannot move a directory into itself")
            if ino == ROOT_INO:
                return
            ino = txn.inode(ino).parent

    def _reparent(self, txn: Txn, directory: int, old_parent: int, new_parent: int) -> None:
        txn.inode(directory).parent = new_parent
        txn.inode(old_parent).nlink -= 1
        txn.inode(new_parent).nlink += 1
        for ino in (directory, old_parent, new_parent):
            txn.changed(ino)

    # -- attributes --------------------------------------------------------

    @retried
    def setattr(self, ino: int, **changes: int) -> Inode:
        """Set any of mode, uid, gid, atime_ns, mtime_ns, ctime_ns; ctime moves to now."""
        txn = Txn(self.kv)
        node = txn.touch(ino, mtime=False)
        for field, value in changes.items():
            setattr(node, field, value)
        txn.commit()
        return node

    @retried
    def set_atime(self, ino: int, atime_ns: int) -> None:
        """Record an access; unlike other changes this leaves ctime alone. An access is not
        worth failing a read for: while the store cannot write, it goes unrecorded."""
        txn = Txn(self.kv)
        node = txn.inode(ino)
        if node.frozen:
            return
        node.atime_ns = atime_ns
        txn.changed(ino)
        try:
            txn.commit()
        except MetaWriteFailed:
            pass

    @retried
    def set_frozen(self, inodes: list[int], frozen: bool) -> None:
        """Freeze (or thaw) these inodes in one transaction; ctime stays, as for an access."""
        txn = Txn(self.kv)
        for ino in inodes:
            txn.set_frozen(ino, frozen)
        txn.commit()

    def volume_stats(self) -> tuple[int, int]:
        """(inodes, bytes held by blocks) across the volume."""
        return self.usage.inodes, self.usage.bytes
