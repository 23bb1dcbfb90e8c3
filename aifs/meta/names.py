"""Checks on names that every namespace operation shares."""

import errno

from aifs.errors import FsError

NAME_MAX = 255


def check_name(name: bytes) -> None:
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes exceeds {NAME_MAX}")
    if not name or b"/" in name or b"\0" in name:
        raise FsError(errno.EINVAL, f"invalid name {name!r}")
    if name in (b".", b".."):
        raise FsError(errno.EEXIST, f"{name!r} always exists")
