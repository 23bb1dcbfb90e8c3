"""Appending large records to a segment without the page cache (O_DIRECT).

Copying a 4 MiB block into the page cache costs this kind of machine several
milliseconds of kernel CPU (allocating and accounting the pages), and a
checkpoint's blocks are rarely read back soon. An O_DIRECT write of the same
bytes from page-aligned memory costs almost no CPU: the device takes them. It
needs the memory, the file offset and the length aligned to pages, while a
segment's records are packed end to end; so a record is written as whole pages:
the start of its first page (the previous record's last bytes, unchanged), the
record, and zeros to the end of its last page, which the next record overwrites.
The format on disk is the same as for a buffered append.
"""

import errno
import mmap
import os
from collections.abc import Callable

from aifs.tiers.checksum import Buffer

PAGE = 4096
DIRECT_MIN = 1 << 20  # smaller records go through the page cache: they are few bytes, often read soon
WINDOW = 8 << 20  # the most one O_DIRECT append writes at once, in pages


def round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


def round_down(n: int) -> int:
    return n - n % PAGE


class AlignedScratch:
    """Page-aligned memory, grown on demand and reused, to gather a record into."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None

    def view(self, size: int) -> memoryview:
        """`size` bytes of it; a larger size replaces the memory (views of the old stay valid)."""
        if self._map is None or len(self._map) < size:
            self._map = mmap.mmap(-1, round_up(size))
        return memoryview(self._map)[:size]


class DirectAppender:
    """Writes one segment's records through its own O_DIRECT descriptor.

    It remembers the bytes of the page its last record ended in, so the next record
    need not read them back from the disk. Any other write at or past that page
    (a buffered append, a header's state byte) must call `forget_from`.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._tail_page = -1
        self._tail = b""

    @classmethod
    def open(cls, path: os.PathLike) -> "DirectAppender":
        """Its descriptor reads too (O_DIRECT reads of whole pages). Raises OSError(EINVAL)
        where the file system refuses O_DIRECT (tmpfs on older kernels, some FUSE file systems)."""
        return cls(os.open(path, os.O_RDWR | os.O_DIRECT))

    def append(self, read: Callable[[int, int], bytes], start: int, parts: list[Buffer],
               scratch: AlignedScratch) -> None:
        """Write `parts` end to end from file offset `start` (the segment's end), taking the
        bytes before it in its page from memory or from `read(length, offset)`; raises
        OSError(EINVAL) when the file system turns out not to take O_DIRECT writes.

        The pages go out through WINDOW bytes of `scratch`, a write each time it fills: a run
        of any size maps and faults in the same memory, once."""
        page = round_down(start)
        head = start - page
        total = head + sum(map(len, parts))
        window = scratch.view(WINDOW)
        tail = self._tail if page == self._tail_page else read(head, page)
        offset, filled = page, 0
        for piece in (tail, *parts, bytes(round_up(total) - total)):
            piece = memoryview(piece)
            while piece:
                taken = min(len(piece), WINDOW - filled)
                window[filled:filled + taken] = piece[:taken]
                filled, piece = filled + taken, piece[taken:]
                if filled == WINDOW:
                    self._write(window, offset)
                    offset, filled = offset + WINDOW, 0
        if filled:
            self._write(window[:filled], offset)
        else:
            offset -= WINDOW
        # `offset` is where the last write began; the run's last page is in the window
        last = round_down(page + total) - offset
        self._tail_page, self._tail = offset + last, bytes(window[last:page + total - offset])

    def _write(self, pages: memoryview, offset: int) -> None:
        if os.pwritev(self.fd, [pages], offset) != len(pages):
            raise OSError(errno.ENOSPC, "short write to an NVMe segment")

    def forget_from(self, offset: int) -> None:
        """A write elsewhere touched the file at `offset`: the remembered page may be stale."""
        if offset >= self._tail_page:
            self._tail_page = -1

    def close(self) -> None:
        os.close(self.fd)
