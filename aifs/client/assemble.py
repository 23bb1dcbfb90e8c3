"""A file's bytes from an answer of the data socket: every object checked against its checksum,
holes as zeros. What does not match (a segment record dropped or reused since the answer, a
short read) is never returned: the caller asks again, then reads through the mount. The work
itself is C (aifs/bypass/_reader.c).

Blocks are tuples, not the wire's maps: a kept answer is read again and again, and a tuple
is unpacked in one step where a map costs a lookup per field.
"""

from aifs.bypass import _reader

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


def assemble(size: int, block_size: int, blocks: tuple[Block, ...], fds: dict[int, int]) -> bytes:
    """The file's bytes; `fds` are the segment files held, by number."""
    data = _reader.assemble(size, block_size, blocks, fds)
    if type(data) is not bytes:
        raise Mismatch(data[0])
    return data
