"""Block checksums: xxh3-64, fast enough to verify every block that comes back from below RAM.

Besides the whole object's checksum, an object larger than one chunk (64 KiB)
carries one checksum per chunk, so that a small read can fetch and verify only
the chunks it needs (a ranged GET from S3, a ranged read from a flash server)
instead of the whole 4 MiB block. The chunk size is part of the volume format:
64 KiB crosses loopback TCP in about a third of the time 256 KiB takes, and costs
512 bytes of metadata per 4 MiB block.
"""

import struct
from collections.abc import Callable, Sequence

import xxhash

Buffer = bytes | bytearray | memoryview

CHUNK = 64 << 10
_SUM = struct.Struct("<Q")

# The xxh3-64 of a buffer as an integer: xxhash's own function, not a wrapper around it, as
# readers of the data socket call it several times per file.
checksum: Callable[[Buffer], int] = xxhash.xxh3_64_intdigest


def chunk_sums(data: Buffer) -> bytes:
    """Packed checksums of each CHUNK of `data`; empty when one chunk holds it all."""
    return sums_of([data])[1]


def sums_of(parts: Sequence[Buffer]) -> tuple[int, bytes]:
    """The checksum and the chunk checksums of the bytes of `parts` one after another,
    without joining them (a chunk may span two parts)."""
    whole, chunk = xxhash.xxh3_64(), xxhash.xxh3_64()
    sums: list[int] = []
    filled = total = 0
    for part in parts:
        view = memoryview(part).cast("B")
        whole.update(view)
        total += len(view)
        pos = 0
        while pos < len(view):
            take = min(CHUNK - filled, len(view) - pos)
            chunk.update(view[pos:pos + take])
            filled, pos = filled + take, pos + take
            if filled == CHUNK:
                sums.append(chunk.intdigest())
                chunk.reset()
                filled = 0
    if filled:
        sums.append(chunk.intdigest())
    packed = b"" if total <= CHUNK else struct.pack(f"<{len(sums)}Q", *sums)
    return whole.intdigest(), packed


def chunk_span(lo: int, hi: int, length: int) -> tuple[int, int]:
    """The byte range [start, end) of the whole chunks that cover [lo, hi) of an object."""
    return lo // CHUNK * CHUNK, min(-(-hi // CHUNK) * CHUNK, length)


def chunks_match(data: Buffer, start: int, sums: bytes) -> bool:
    """Do `data`, read from chunk-aligned offset `start`, match their chunks' checksums?"""
    view = memoryview(data)
    first = start // CHUNK
    for i in range(0, len(view), CHUNK):
        (expected,) = _SUM.unpack_from(sums, (first + i // CHUNK) * _SUM.size)
        if checksum(view[i:i + CHUNK]) != expected:
            return False
    return True


class CorruptBlock(Exception):
    """Bytes of a block did not match its checksum; names the block and the tier."""

    def __init__(self, block_id: int, tier: str) -> None:
        super().__init__(f"block {block_id:016x} from tier {tier} failed its checksum")
        self.block_id = block_id
        self.tier = tier
