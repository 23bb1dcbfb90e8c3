"""The answer board: the answers root readers may keep, in memory every root reader of the mount
shares, so that each process reuses an answer any of them asked for. A shuffled DataLoader deals
every file to another worker each epoch, and an answer kept by one process alone would then
never be used again.

The board is a memfd in two parts: slots, then a ring of records. A record is the xxh3-64 of
the rest of it, then the answer in fixed-size binary fields (no decoding of maps): the file's
size, the block size, the path, the blocks (index, offset, length, checksum, segment, at,
object) and the stamp. Each path falls in one slot by the hash of its bytes; the slot holds
where the newest record of a path falling there is (offset << 24 | length; 0 for none). The
mount alone writes (records first, then the slot, each slot one aligned 8-byte store); readers
never lock. What a reader finds is used only when its bytes match their hash and name the path
asked for: a record overwritten as the ring wrapped, a slot taken by another path, or a record
being written while read is simply no answer.

An answer on the board is as good as one the reader was sent: used only while the change table
holds its stamp, its bytes checked against their checksums. It is handed to root readers only,
with the change table, since every answer on it points into segment files, which only root
readers are given.
"""

import mmap
import os
import struct

from aifs.bypass.memfd import read_only_view, sealed_memfd
from aifs.tiers.checksum import checksum

LENGTH_BITS = 24
MAX_RECORD = (1 << LENGTH_BITS) - 1
SLOT_SHARE = 4  # a quarter of the board's bytes are slots: one for every 32 bytes of the whole
HEAD = struct.Struct("<QQIHHI")  # hash of the rest, size, block size, path bytes, blocks, stamp words
BLOCK = struct.Struct("<IIIQQQQ")  # index, offset, length, checksum, segment, at, object
# (size, block size, blocks as (index, offset, length, checksum, segment, at, object, None), stamp)
Posted = tuple[int, int, tuple[tuple, ...], tuple[int, ...]]


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
        entry = self._slots[self.layout.slot(path)]
        at, length = self.layout.ring_at + (entry >> LENGTH_BITS), entry & MAX_RECORD
        if length < HEAD.size or at + length > self.layout.size:
            return None
        body = self._map[at:at + length]  # a copy: what is checked is what is used
        digest, size, block_size, path_bytes, blocks, words = HEAD.unpack_from(body)
        at_blocks = HEAD.size + path_bytes
        at_stamp = at_blocks + blocks * BLOCK.size
        if at_stamp + 8 * words != length or checksum(memoryview(body)[8:]) != digest:
            return None
        if body[HEAD.size:at_blocks] != path:
            return None
        return (size, block_size, tuple(block + (None,) for block in BLOCK.iter_unpack(body[at_blocks:at_stamp])),
                struct.unpack_from(f"<{words}Q", body, at_stamp))

    def close(self) -> None:
        self._slots.release()
        self._map.close()


def _record(path: bytes, answer: dict, block_size: int) -> bytes:
    blocks, stamp = answer["blocks"], answer["stamp"]
    body = bytearray(HEAD.pack(0, answer["size"], block_size, len(path), len(blocks), len(stamp)))
    body += path
    for b in blocks:
        body += BLOCK.pack(b["index"], b["offset"], b["length"], b["checksum"], b["segment"], b["at"], b["object"])
    body += struct.pack(f"<{len(stamp)}Q", *stamp)
    struct.pack_into("<Q", body, 0, checksum(memoryview(body)[8:]))
    return bytes(body)
