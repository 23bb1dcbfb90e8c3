"""The header in front of each record of a segment file, and how a real one is told from damage.

A header names its block and the record's length, and carries a CRC-32 of its magic, block
id and length: a flipped byte in any of them is caught, so one damaged header is not taken
for the end of the segment. The state byte is rewritten in place (staged, then live, then
dead), so it stays outside the CRC and is checked against the states a record can have.

Segments written before headers had a CRC (magic AIFB, 24-byte headers) are still read:
their headers are known by magic, state and padding alone.
"""

import os
import struct
import zlib
from dataclasses import dataclass

HEADER = struct.Struct("<4sB3xQQI4x")  # magic, state, block id, length, CRC-32
MAGIC = b"AIFR"
OLD_HEADER = struct.Struct("<4sB3xQQ")  # the layout without a CRC
OLD_MAGIC = b"AIFB"
_SUMMED = struct.Struct("<4sQQ")
LIVE, DEAD, STAGED = 1, 0, 2  # STAGED: written for a commit that may not have happened yet
_STATES = frozenset((LIVE, DEAD, STAGED))
STATE_OFFSET = 4  # in both layouts
_PAD = b"\0\0\0"
_ZEROS = bytes(1 << 20)
_SEARCH_WINDOW = 4 << 20


@dataclass(frozen=True, slots=True)
class Location:
    """Where a block's bytes sit: segment number, offset of the bytes, their length, and the
    size of the header in front of them (the old layout's is shorter)."""

    segment: int
    offset: int
    length: int
    header: int = HEADER.size

    @property
    def header_offset(self) -> int:
        return self.offset - self.header

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class Header:
    state: int
    block_id: int
    length: int
    size: int  # HEADER.size, or OLD_HEADER.size for the old layout


def _crc(magic: bytes, block_id: int, length: int) -> int:
    return zlib.crc32(_SUMMED.pack(magic, block_id, length))


def pack_header(block_id: int, length: int, state: int, size: int = HEADER.size) -> bytes:
    """A header of `size` bytes: the current layout, or the old one to mend a record of an old segment."""
    if size == OLD_HEADER.size:
        return OLD_HEADER.pack(OLD_MAGIC, state, block_id, length)
    return HEADER.pack(MAGIC, state, block_id, length, _crc(MAGIC, block_id, length))


def parse_header(raw: bytes) -> Header | None:
    """The header `raw` starts with, or None when its bytes are not a sound header."""
    magic = raw[:4]
    if magic == MAGIC and len(raw) >= HEADER.size:
        _, state, block_id, length, crc = HEADER.unpack_from(raw)
        if crc == _crc(MAGIC, block_id, length) and state in _STATES:
            return Header(state, block_id, length, HEADER.size)
    elif magic == OLD_MAGIC and len(raw) >= OLD_HEADER.size:
        _, state, block_id, length = OLD_HEADER.unpack_from(raw)
        if state in _STATES and raw[5:8] == _PAD:
            return Header(state, block_id, length, OLD_HEADER.size)
    return None


def header_fields(raw: bytes) -> tuple[int, int] | None:
    """(block id, length) as the bytes of a damaged header still give them, read in the
    layout their magic names (the current one when the magic is damaged too)."""
    layout = OLD_HEADER if raw[:4] == OLD_MAGIC else HEADER
    if len(raw) < layout.size:
        return None
    _, _, block_id, length, *_ = layout.unpack_from(raw)
    return block_id, length


def find_headers(fd: int, start: int, size: int) -> list[tuple[int, Header]]:
    """(offset, header) of every sound header at or after `start` whose record fits in the
    file's `size` bytes, in file order. Records may overlap: a header may lie inside
    another record's bytes.

    The file is read in windows with pread, each followed by one header's length of the
    next, so a header across a window's end is found whole (once: only starts inside the
    window count). A mapping of the file would fault, and end the process, should anything
    shorten the file while it is searched."""
    found = []
    for window in range(start, size, _SEARCH_WINDOW):
        chunk = os.pread(fd, min(_SEARCH_WINDOW + HEADER.size, size - window), window)
        for magic in (MAGIC, OLD_MAGIC):
            at = chunk.find(magic)
            while 0 <= at < _SEARCH_WINDOW:
                header = parse_header(chunk[at:at + HEADER.size])
                offset = window + at
                if header is not None and offset + header.size + header.length <= size:
                    found.append((offset, header))
                at = chunk.find(magic, at + 1)
    return sorted(found, key=lambda item: item[0])


def all_zeros(fd: int, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file are all zero (what an O_DIRECT append leaves
    after its record, up to the end of its page)."""
    while start < end:
        chunk = os.pread(fd, min(len(_ZEROS), end - start), start)
        if not chunk:
            return True
        if chunk != _ZEROS[:len(chunk)]:
            return False
        start += len(chunk)
    return True
