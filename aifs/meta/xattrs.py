"""Extended attributes: one key per (inode, name)."""

import errno

from aifs.meta import keys
from aifs.errors import FsError
from aifs.meta.txn import Txn, retried

XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 65536
NAMESPACES = (b"user.", b"trusted.", b"security.")


def check_namespace(name: bytes) -> None:
    """Linux accepts only known namespaces; system.* (ACLs) is not supported here."""
    if not name.startswith(NAMESPACES):
        raise FsError(errno.EOPNOTSUPP, f"attribute {name!r} is in no supported namespace")


class XattrOps:
    """Mixed into MetaEngine; needs `kv`."""

    def get_xattr(self, ino: int, name: bytes) -> bytes:
        check_namespace(name)
        value = self.kv.get(keys.xattr(ino, name))
        if value is None:
            raise FsError(errno.ENODATA, f"no attribute {name!r} on inode {ino}")
        return value

    def has_xattr(self, ino: int, name: bytes) -> bool:
        return self.kv.get(keys.xattr(ino, name)) is not None

    def list_xattrs(self, ino: int) -> list[bytes]:
        prefix = keys.xattr_prefix(ino)
        return [key[len(prefix):] for key, _ in self.kv.scan(prefix)]

    @retried
    def set_xattr(self, ino: int, name: bytes, value: bytes) -> None:
        if len(name) > XATTR_NAME_MAX:
            raise FsError(errno.ERANGE, f"attribute name of {len(name)} bytes is too long")
        check_namespace(name)
        if len(value) > XATTR_SIZE_MAX:
            raise FsError(errno.E2BIG, f"attribute value of {len(value)} bytes is too large")
        txn = Txn(self.kv)
        txn.touch(ino, mtime=False)
        txn.batch.put(keys.xattr(ino, name), value)
        txn.commit()

    @retried
    def remove_xattr(self, ino: int, name: bytes) -> None:
        check_namespace(name)
        txn = Txn(self.kv)
        if txn.get(keys.xattr(ino, name)) is None:
            raise FsError(errno.ENODATA, f"no attribute {name!r} on inode {ino}")
        txn.touch(ino, mtime=False)
        txn.batch.delete(keys.xattr(ino, name))
        txn.commit()
