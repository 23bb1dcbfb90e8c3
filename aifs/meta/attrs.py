"""Inode attributes and block references, and their compact msgpack encoding."""

import stat
from dataclasses import dataclass

import msgpack

FROZEN = 1  # Inode.flags: part of a frozen (immutable) tree, cached everywhere without revalidation


@dataclass(slots=True)
class Inode:
    """Attributes of one inode.

    `alloc` is the bytes held by blocks (st_blocks reports it); `parent` is kept for
    directories only, whose single parent makes `..` and the rename loop check one get each.
    `flags` holds FROZEN; it is encoded only when set, so unflagged inodes keep their old form.
    """

    mode: int
    uid: int
    gid: int
    size: int = 0
    nlink: int = 1
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    rdev: int = 0
    alloc: int = 0
    parent: int = 0
    flags: int = 0

    def encode(self) -> bytes:
        fields = (self.mode, self.uid, self.gid, self.size, self.nlink, self.atime_ns,
                  self.mtime_ns, self.ctime_ns, self.rdev, self.alloc, self.parent)
        return msgpack.packb((*fields, self.flags) if self.flags else fields)

    @classmethod
    def decode(cls, data: bytes) -> "Inode":
        return cls(*msgpack.unpackb(data))

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_reg(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def frozen(self) -> bool:
        return bool(self.flags & FROZEN)


@dataclass(frozen=True, slots=True)
class BlockRef:
    """One logical block of a file: `length` bytes at `offset` inside immutable object `block_id`."""

    block_id: int
    offset: int
    length: int
    checksum: int
    sums: bytes = b""  # per-chunk checksums of the object (aifs.tiers.checksum), for ranged reads

    def encode(self) -> bytes:
        fields = (self.block_id, self.offset, self.length, self.checksum)
        return msgpack.packb((*fields, self.sums) if self.sums else fields)

    @classmethod
    def decode(cls, data: bytes) -> "BlockRef":
        return cls(*msgpack.unpackb(data))
