"""The answer board: the answers root readers may keep, in memory every root reader of the mount
shares, so that each process reuses an answer any of them asked for. A shuffled DataLoader deals
every file to another worker each epoch, and an answer kept by one process alone would then
never be used again.

The board is a memfd in two parts: slots, then a ring of records. A record is the xxh3-64 of
the rest of it, then the answer in fixed-size binary fields (no decoding of maps): the file's
size, the block size, the blocks (index, offset, length, checksum, segment, at, object), the
stamp split into the counters it names and the values they must show, and last the path. A
reader unpacks all but the path in one call of a format made once per shape, into the very
tuple it keeps (aifs.client.answers). Each path falls in one slot by the hash of its bytes;
the slot holds where the newest record of a path falling there is (offset << 24 | length; 0
for none). The mount alone writes (records first, then the slot, each slot one aligned 8-byte
store); readers never lock. What a reader finds is used only when its bytes match their hash
and name the path asked for: a record overwritten as the ring wrapped, a slot taken by another
path, or a record being written while read is simply no answer.

An answer on the board is as good as one the reader was sent: used only while the change table
holds its stamp, its bytes checked against their checksums. It is handed to root readers only,
with the change table, since every answer on it points into segment files, which only root
readers are given.
"""

import mmap
import os
import struct
from functools import lru_cache

from aifs.bypass.changes import split
from aifs.bypass.memfd import read_only_view, sealed_memfd
from aifs.tiers.checksum import checksum

LENGTH_BITS = 24
MAX_RECORD = (1 << LENGTH_BITS) - 1
SLOT_SHARE = 4  # a quarter of the board's bytes are slots: one for every 32 bytes of the whole
HEAD = struct.Struct("<QQIHHI")  # hash of the rest, size, block size, path bytes, blocks, counters
FIELDS = 7  # of a block, 8 bytes each: index, offset, length, checksum, segment, at, object
# (size, block size, blocks as (index, offset, length, checksum, segment, at, object, None),
# the stamp's counters, the values they must show): the client's kept answer
Posted = tuple[int, int, tuple[tuple, ...], tuple[int, ...], tuple[int, ...]]


@lru_cache(maxsize=256)
def _shape(blocks: int, counters: int) -> struct.Struct:
    """The fields after the head of a record of `blocks` blocks and `counters` counters: all
    8-byte words, so that a format of any size is one repeated code."""
    return struct.Struct(f"<{FIELDS * blocks + 2 * counters}Q")


class Layout:
    """Where the slots and the ring are in a board of `size` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots = 1 << ((size // SLOT_SHARE // 8).bit_length() - 1)
        self.ring_at = self.slots * 8
        self.ring = size - self.ring_at

    def slot(self, path: bytes) -> int:
        return checksum(path) & (self.slots - 1)


class AnswerBoard:
    """The mount's side: posts answers, from the event loop only."""

    def __init__(self, size: int) -> None:
        self.layout = Layout(size)
        self.fd, self._map = sealed_memfd("aifs-answers", size, allocate=False)
        self._slots = memoryview(self._map)[:self.layout.ring_at].cast("Q")
        self._end = 0  # where in the ring the next record goes

    def post(self, path: bytes, answer: dict, block_size: int) -> None:
        """Post an answer whose blocks are all segment records (as every stamped one is)."""
        body = _record(path, answer, block_size)
        if len(body) > min(MAX_RECORD, self.layout.ring):
            return  # an answer of that many blocks is asked for again
        if self._end + len(body) > self.layout.ring:
            self._end = 0
        at = self.layout.ring_at + self._end
        self._map[at:at + len(body)] = body
        self._slots[self.layout.slot(path)] = self._end << LENGTH_BITS | len(body)
        self._end += len(body)

    def close(self) -> None:
        self._slots.release()
        self._map.close()
        os.close(self.fd)


class BoardView:
    """A root reader's read-only view of a mount's answer board."""

    def __init__(self, fd: int) -> None:
        """Takes over `fd`."""
        self._map: mmap.mmap = read_only_view(fd)
        self.layout = Layout(len(self._map))
        self._slots = memoryview(self._map)[:self.layout.ring_at].cast("Q")

    def look(self, path: bytes) -> Posted | None:
        """The newest answer posted for `path`, or None; its stamp is still to be checked."""
        layout = self.layout
        entry = self._slots[layout.slot(path)]
        at, length = layout.ring_at + (entry >> LENGTH_BITS), entry & MAX_RECORD
        if length < HEAD.size or at + length > layout.size:
            return None
        body = self._map[at:at + length]  # a copy: what is checked is what is used
        digest, size, block_size, path_bytes, blocks, counters = HEAD.unpack_from(body)
        shape = _shape(blocks, counters)
        if (HEAD.size + shape.size + path_bytes != length or path_bytes != len(path) or not body.endswith(path)
                or checksum(memoryview(body)[8:]) != digest):
            return None
        fields = shape.unpack_from(body, HEAD.size)
        stamp_at = FIELDS * blocks
        return (size, block_size, _blocks(fields, stamp_at), fields[stamp_at:stamp_at + counters],
                fields[stamp_at + counters:])

    def close(self) -> None:
        self._slots.release()
        self._map.close()


def _blocks(fields: tuple[int, ...], end: int) -> tuple[tuple, ...]:
    if end == FIELDS:  # the common small file
        return (fields[:FIELDS] + (None,),)
    return tuple(fields[i:i + FIELDS] + (None,) for i in range(0, end, FIELDS))


def _record(path: bytes, answer: dict, block_size: int) -> bytes:
    blocks = answer["blocks"]
    slots, values = split(answer["stamp"])
    fields = [field for b in blocks for field in (b["index"], b["offset"], b["length"], b["checksum"],
                                                  b["segment"], b["at"], b["object"])]
    body = bytearray(HEAD.pack(0, answer["size"], block_size, len(path), len(blocks), len(slots)))
    body += _shape(len(blocks), len(slots)).pack(*fields, *slots, *values)
    body += path
    struct.pack_into("<Q", body, 0, checksum(memoryview(body)[8:]))
    return bytes(body)
