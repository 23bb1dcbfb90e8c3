"""Key layout of the metadata store (docs/architecture.md).

Inode numbers and block ids are big-endian u64 so prefix scans stay ordered.
Every key that belongs to an inode carries that inode right after its tag; the
shard of a key is derived from that owner, so a directory's entries and a
file's attributes and block map each sit together in one shard.
"""

import stat
import struct

DENTRY = b"D"
INODE = b"I"
BLOCK = b"B"
XATTR = b"X"
SYMLINK = b"L"
ORPHAN = b"O"
COUNTER = b"C"
UPLOAD = b"U"
GARBAGE = b"G"
PIN = b"P"
SESSION = b"S"
HOLDER = b"H"
LEASE = b"K"
LOCKS = b"F"
RUSH = b"R"
PACK = b"A"
PACKED = b"M"
SUPERSEDED = b"Z"

_U64 = struct.Struct(">Q")
_ENTRY = struct.Struct(">QB")
OWNED_TAGS = frozenset((DENTRY, INODE, BLOCK, XATTR, SYMLINK))

# Every counter's name. Engines keep counters apart from plain values, each in its own native
# form, so whatever copies a volume between engines (aifs meta dump) moves these by name.
COUNTERS = (b"next_ino", b"next_block", b"next_session", b"usage.inodes", b"usage.bytes")


def u64(value: int) -> bytes:
    return _U64.pack(value)


def read_u64(data: bytes, at: int = 0) -> int:
    return _U64.unpack_from(data, at)[0]


def dentry(parent: int, name: bytes) -> bytes:
    return DENTRY + u64(parent) + name


def dentry_prefix(parent: int) -> bytes:
    return DENTRY + u64(parent)


def entry(ino: int, mode: int) -> bytes:
    """A directory entry's value: the inode it names, then that inode's file type (the S_IFMT
    bits, shifted down), so a listing has names and types without reading any inode."""
    return _ENTRY.pack(ino, stat.S_IFMT(mode) >> 12)


def read_entry(value: bytes) -> tuple[int, int | None]:
    """(inode, S_IFMT bits) of an entry's value; None for the bits of the older form, the inode alone."""
    if len(value) > 8:
        ino, kind = _ENTRY.unpack(value)
        return ino, kind << 12
    return _U64.unpack(value)[0], None


def inode(ino: int) -> bytes:
    return INODE + u64(ino)


def block(ino: int, index: int) -> bytes:
    return BLOCK + u64(ino) + u64(index)


def block_prefix(ino: int) -> bytes:
    return BLOCK + u64(ino)


def xattr(ino: int, name: bytes) -> bytes:
    return XATTR + u64(ino) + name


def xattr_prefix(ino: int) -> bytes:
    return XATTR + u64(ino)


def symlink(ino: int) -> bytes:
    return SYMLINK + u64(ino)


def orphan(ino: int) -> bytes:
    return ORPHAN + u64(ino)


def counter(name: bytes) -> bytes:
    return COUNTER + name


VOLUME = counter(b"volume")  # the volume record (uuid, block size, format): a plain value, not a counter


def upload(block_id: int) -> bytes:
    return UPLOAD + u64(block_id)


def rush(block_id: int) -> bytes:
    """A reader on another node waits for this staged block: its node uploads it first."""
    return RUSH + u64(block_id)


def rushed(changed: list[bytes]) -> list[int]:
    """The blocks whose `rush` keys are among `changed` (an engine's push)."""
    return [read_u64(key, 1) for key in changed if key[:1] == RUSH]


def garbage(block_id: int) -> bytes:
    return GARBAGE + u64(block_id)


def pack(pack_id: int) -> bytes:
    """A pack: one durable object holding several small blocks end to end (aifs.meta.packs)."""
    return PACK + u64(pack_id)


def packed(block_id: int) -> bytes:
    """Where a packed block lives: its pack, and its offset there."""
    return PACKED + u64(block_id)


def superseded(block_id: int) -> bytes:
    """A block moved into a pack: its object of its own is deleted once the time in the value
    has come (a reader that found it just before the move still reads it)."""
    return SUPERSEDED + u64(block_id)


def pin(ino: int) -> bytes:
    """A pinned file: volume-wide like orphans, so all pins load with one scan at mount."""
    return PIN + u64(ino)


def session(sid: int) -> bytes:
    """A mount of a shared volume: who it is and its heartbeat (aifs.meta.sessions)."""
    return SESSION + u64(sid)


def holder(ino: int, sid: int) -> bytes:
    """Session `sid` has `ino` open: an unlink anywhere keeps the inode until it lets go."""
    return HOLDER + u64(ino) + u64(sid)


def holder_prefix(ino: int) -> bytes:
    return HOLDER + u64(ino)


def locks(ino: int) -> bytes:
    """The file locks held on `ino`, by every node (aifs.meta.locks)."""
    return LOCKS + u64(ino)


def lease(name: bytes) -> bytes:
    """A duty that runs on one node at a time (garbage deletion), held by a live session."""
    return LEASE + name


def owner(key: bytes) -> int | None:
    """The inode a key belongs to, or None for volume-wide keys (counters, queues, orphans)."""
    if key[:1] in OWNED_TAGS:
        return read_u64(key, 1)
    return None


def is_owned_tag(prefix: bytes) -> bool:
    """A bare tag of per-inode keys: its keys are spread over every shard."""
    return len(prefix) < 9 and prefix[:1] in OWNED_TAGS
