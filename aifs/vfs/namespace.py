"""Namespace operations as the FUSE layer asks for them: names, links, attributes and
extended attributes, on top of MetaEngine. Kept here, beside the open files and the name
cache, so that whatever must follow a change (paths for rules, open-unlinked files) is
handled in one place whichever front end asks."""

import errno

from aifs.errors import FsError
from aifs.meta import Inode, MetaEngine
from aifs.meta.engine import IsOpen
from aifs.vfs.names import NameCache


class Namespace:
    def __init__(self, meta: MetaEngine, names: NameCache, is_open: IsOpen) -> None:
        self.meta = meta
        self.names = names
        self._is_open = is_open

    def lookup(self, parent: int, name: bytes) -> int | None:
        """The inode `name` names in `parent`, or None when there is no such entry."""
        try:
            ino, _ = self.meta.lookup(parent, name)
        except FsError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        self.names.remember(ino, parent, name)
        return ino

    def create(self, parent: int, name: bytes, mode: int, uid: int, gid: int,
               rdev: int = 0, target: bytes | None = None) -> int:
        ino, _ = self.meta.create(parent, name, mode, uid, gid, rdev, target)
        self.names.remember(ino, parent, name)
        return ino

    def link(self, ino: int, parent: int, name: bytes) -> None:
        self.meta.link(ino, parent, name)
        self.names.remember(ino, parent, name)

    def unlink(self, parent: int, name: bytes) -> None:
        self.meta.unlink(parent, name, self._is_open)

    def rmdir(self, parent: int, name: bytes) -> None:
        self.meta.rmdir(parent, name)

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int) -> None:
        self.meta.rename(old_parent, old_name, new_parent, new_name, flags, self._is_open)
        moved, _ = self.meta.lookup(new_parent, new_name)
        self.names.moved(old_parent, old_name, moved, new_parent, new_name)

    def readlink(self, ino: int) -> bytes:
        return self.meta.readlink(ino)

    def directory(self, ino: int) -> Inode:
        node = self.meta.getattr(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        return node

    def set_attributes(self, ino: int, **changes: int) -> Inode:
        return self.meta.setattr(ino, **changes)

    # -- extended attributes -----------------------------------------------

    def get_xattr(self, ino: int, name: bytes) -> bytes:
        return self.meta.get_xattr(ino, name)

    def has_xattr(self, ino: int, name: bytes) -> bool:
        return self.meta.has_xattr(ino, name)

    def set_xattr(self, ino: int, name: bytes, value: bytes) -> None:
        self.meta.set_xattr(ino, name, value)

    def list_xattrs(self, ino: int) -> list[bytes]:
        return self.meta.list_xattrs(ino)

    def remove_xattr(self, ino: int, name: bytes) -> None:
        self.meta.remove_xattr(ino, name)
