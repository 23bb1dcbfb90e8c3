"""A file's bytes from an answer of the data socket: every object checked against its checksum,
holes as zeros. What does not match (a segment record dropped or reused since the answer, a
short read) is never returned: the caller asks again, then reads through the mount.

Blocks are tuples, not the wire's maps: a kept answer is read again and again, and a tuple
is unpacked in one step where a map costs a lookup per field.
"""

import os

from aifs.client.segments import SegmentFiles
from aifs.tiers.checksum import checksum

# (index, offset, length, checksum, segment, at, object, data): the object's bytes are `data`
# when inline, else `object` bytes at `at` in `segment` (data None)
Block = tuple[int, int, int, int, int | None, int, int, bytes | None]


class Mismatch(Exception):
    """Bytes read did not match their checksum; `segment` is the file they came from, if any."""

    def __init__(self, segment: int | None) -> None:
        super().__init__(segment)
        self.segment = segment


def blocks_of(answer: dict) -> tuple[Block, ...]:
    """The blocks of a wire answer."""
    return tuple((b["index"], b["offset"], b["length"], b["checksum"], b.get("segment"), b.get("at", 0),
                  b.get("object", 0), b.get("data")) for b in answer["blocks"])


def assemble(size: int, block_size: int, blocks: tuple[Block, ...], segments: SegmentFiles) -> bytes:
    if len(blocks) == 1 and blocks[0][0] == 0 and blocks[0][1] == 0 and blocks[0][2] == size:
        data = _object(blocks[0], segments)
        if len(data) == size:
            return data  # a file of one whole object, the common small file: no copy
    out = bytearray(size)
    for block in blocks:
        index, offset, length = block[:3]
        start = index * block_size
        count = min(length, size - start)
        if count > 0:
            piece = memoryview(_object(block, segments))[offset:offset + count]
            if len(piece) != count:  # an answer at odds with itself
                raise Mismatch(block[4])
            out[start:start + count] = piece
    return bytes(out)


def _object(block: Block, segments: SegmentFiles) -> bytes:
    """The block's object, verified."""
    _, _, _, expected, segment, at, length, data = block
    if data is None:
        fd = segments.fd_of(segment)
        try:
            data = os.pread(fd, length, at) if fd is not None else b""
        except OSError:
            data = b""
    if checksum(data) != expected:
        raise Mismatch(segment)
    return data
