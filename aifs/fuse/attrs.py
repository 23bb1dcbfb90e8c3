"""Inode attributes as pyfuse3 entries, with the cache timeouts the kernel should use."""

from dataclasses import dataclass

import pyfuse3

from aifs.meta import Inode

PREFERRED_IO = 1 << 20


FROZEN_TIMEOUT_S = 3600.0  # a frozen tree cannot change until thawed, and a thaw is pushed to every node


@dataclass(frozen=True)
class Timeouts:
    entry: float
    attr: float


def entry_attributes(ino: int, node: Inode, timeouts: Timeouts) -> pyfuse3.EntryAttributes:
    attr = pyfuse3.EntryAttributes()
    attr.st_ino = ino
    attr.generation = 0
    if node.frozen:
        attr.entry_timeout = attr.attr_timeout = FROZEN_TIMEOUT_S
    else:
        attr.entry_timeout = timeouts.entry
        attr.attr_timeout = timeouts.attr
    attr.st_mode = node.mode
    attr.st_nlink = node.nlink
    attr.st_uid = node.uid
    attr.st_gid = node.gid
    attr.st_rdev = node.rdev
    attr.st_size = node.size
    attr.st_blksize = PREFERRED_IO
    attr.st_blocks = -(-node.alloc // 512)
    attr.st_atime_ns = node.atime_ns
    attr.st_mtime_ns = node.mtime_ns
    attr.st_ctime_ns = node.ctime_ns
    return attr


def negative_entry(timeouts: Timeouts) -> pyfuse3.EntryAttributes:
    """A lookup miss the kernel may cache (st_ino 0), so repeated misses cost no request."""
    attr = pyfuse3.EntryAttributes()
    attr.st_ino = 0
    attr.entry_timeout = timeouts.entry
    return attr
