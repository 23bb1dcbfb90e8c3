"""A file's bytes from an answer of the data socket: every object checked against its checksum,
holes as zeros. What does not match (a segment record dropped or reused since the answer, a
short read) is never returned: the caller asks again, then reads through the mount."""

import os

from aifs.client.segments import SegmentFiles
from aifs.tiers.checksum import checksum


class Mismatch(Exception):
    """Bytes read did not match their checksum; `segment` is the file they came from, if any."""

    def __init__(self, segment: int | None) -> None:
        super().__init__(segment)
        self.segment = segment


def assemble(answer: dict, block_size: int, segments: SegmentFiles) -> bytes:
    size, blocks = answer["size"], answer["blocks"]
    if len(blocks) == 1 and blocks[0]["index"] == 0 and blocks[0]["offset"] == 0 and blocks[0]["length"] == size:
        data = _object(blocks[0], segments)
        if len(data) == size:
            return data  # a file of one whole object, the common small file: no copy
    out = bytearray(size)
    for block in blocks:
        start = block["index"] * block_size
        count = min(block["length"], size - start)
        if count > 0:
            offset = block["offset"]
            piece = memoryview(_object(block, segments))[offset:offset + count]
            if len(piece) != count:  # an answer at odds with itself
                raise Mismatch(block.get("segment"))
            out[start:start + count] = piece
    return bytes(out)


def _object(block: dict, segments: SegmentFiles) -> bytes:
    """The block's object, verified."""
    segment = block.get("segment")
    if segment is None:
        data = block["data"]
    else:
        fd = segments.fd_of(segment)
        try:
            data = os.pread(fd, block["object"], block["at"]) if fd is not None else b""
        except OSError:
            data = b""
    if checksum(data) != block["checksum"]:
        raise Mismatch(segment)
    return data
