"""A path below the mount's root to the file it names, as the kernel would walk it for the caller
under default_permissions: search permission on every directory, then read permission on the
file. What only the kernel can judge (symbolic links, POSIX ACLs) is a Fallback."""

import errno
import stat
from aifs.bypass.caller import MAY_READ, MAY_SEARCH, Caller
from aifs.bypass.changes import ChangeTable, split
from aifs.errors import FsError
from aifs.meta import Inode, MetaEngine, keys
from aifs.meta.engine import ROOT_INO

ACL_XATTR = b"system.posix_acl_access"
_UNWALKED = (b"", b".", b"..")


class Fallback(Exception):
    """The file must be read through the mount; the message says why."""


Walked = tuple[int, list[bytes]]  # a directory's inode, and the keys read to find it


class WalkedBefore:
    """The directories a caller's earlier requests walked, each reused while the change table
    shows that none of the keys it was found by (entries, attributes, ACLs on its path) changed:
    a later request sees renames and mode changes all the same."""

    MAX_KNOWN = 4096

    def __init__(self, changes: ChangeTable) -> None:
        self.changes = changes
        self._known: dict[bytes, tuple[Walked, tuple[int, ...], tuple[int, ...]]] = {}  # walked, slots, values

    def get(self, path: bytes) -> Walked | None:
        known = self._known.get(path)
        if known is None:
            return None
        walked, slots, values = known
        if self.changes.shows(slots, values):
            return walked
        del self._known[path]
        return None

    def put(self, path: bytes, walked: Walked, since: int) -> None:
        """Keep a directory walked after the change table stood at `since` (when nothing changed meanwhile)."""
        stamp = self.changes.stamp(since, walked[1])
        if stamp is None:
            return
        if len(self._known) >= self.MAX_KNOWN:
            self._known.clear()
        self._known[path] = (walked, *split(stamp))


class Resolver:
    """Resolves the paths of one request; each directory met is walked once per request, or
    found in `before` when one is given. Along with each file come the metadata keys its answer
    was built from: what must not change for the answer to hold."""

    def __init__(self, meta: MetaEngine, caller: Caller, fresh: bool, before: WalkedBefore | None = None,
                 since: int = 0) -> None:
        """`fresh`: the file's attributes come from the engine itself (a shared volume, where an
        open asks it too), not from this node's cache. `since`: where the change table stood
        before anything of this request was read."""
        self.meta = meta
        self.caller = caller
        self.fresh = fresh
        self._before = before
        self._since = since
        self._dirs: dict[bytes, Walked | Exception] = {}

    def file(self, path: bytes) -> tuple[int, Inode, list[bytes]]:
        """(inode, attributes, keys read) of the regular file at `path`, which the caller may
        read; raises FsError with the errno the open through the mount would give, or Fallback."""
        if not path:
            return *self._readable(ROOT_INO, self.meta.getattr(ROOT_INO)), _own_keys(ROOT_INO)
        parent_path, _, name = path.rpartition(b"/")
        if name in _UNWALKED:
            raise Fallback("the path has '.', '..' or empty components")
        parent, walked = self._directory(parent_path)
        ino, node = self.meta.lookup(parent, name)
        if self.fresh and not node.frozen:
            node = self.meta.getattr(ino, fresh=True)
        return *self._readable(ino, node), walked + [keys.dentry(parent, name), *_own_keys(ino)]

    def _readable(self, ino: int, node: Inode) -> tuple[int, Inode]:
        if stat.S_ISLNK(node.mode):
            raise Fallback("a symbolic link")
        self._no_acl(ino)
        if stat.S_ISDIR(node.mode):
            raise FsError(errno.EISDIR if self._may(node, MAY_READ) else errno.EACCES)
        if not stat.S_ISREG(node.mode):
            raise Fallback("not a regular file")
        if not self._may(node, MAY_READ):
            raise FsError(errno.EACCES)
        return ino, node

    def _directory(self, path: bytes) -> Walked:
        """The inode of the directory at `path` (b"": the root), which the caller may search,
        and the keys read to find it."""
        known = self._dirs.get(path)
        if known is None and self._before is not None:
            known = self._before.get(path)
        if known is None:
            try:
                known = self._walk(path)
            except (FsError, Fallback) as e:
                known = e
            else:
                if self._before is not None:
                    self._before.put(path, known, self._since)
        self._dirs[path] = known
        if isinstance(known, Exception):
            raise known
        return known

    def _walk(self, path: bytes) -> Walked:
        if path:
            parent_path, _, name = path.rpartition(b"/")
            if name in _UNWALKED:
                raise Fallback("the path has '.', '..' or empty components")
            parent, walked = self._directory(parent_path)
            ino, node = self.meta.lookup(parent, name)
            walked = walked + [keys.dentry(parent, name), *_own_keys(ino)]
        else:
            ino, node = ROOT_INO, self.meta.getattr(ROOT_INO)
            walked = _own_keys(ROOT_INO)
        if stat.S_ISLNK(node.mode):
            raise Fallback("a symbolic link in the path")
        if not stat.S_ISDIR(node.mode):
            raise FsError(errno.ENOTDIR)
        self._no_acl(ino)
        if not self._may(node, MAY_SEARCH):
            raise FsError(errno.EACCES)
        return ino, walked

    def _no_acl(self, ino: int) -> None:
        """The kernel checks an ACL; mode bits alone would not say what it allows."""
        if self.meta.has_xattr(ino, ACL_XATTR):
            raise Fallback("a POSIX ACL")

    def _may(self, node: Inode, want: int) -> bool:
        return self.caller.may(node.mode, node.uid, node.gid, want)


def _own_keys(ino: int) -> list[bytes]:
    """The keys of an inode that its answers depend on: its attributes and its ACL."""
    return [keys.inode(ino), keys.xattr(ino, ACL_XATTR)]
