"""Append-only segment files that hold many blocks each.

Creating a file per block costs a few hundred microseconds on ext4; appending to
an open file costs a few. So the NVMe tier appends each block as a record
(header + bytes) to the active segment. A deleted record is marked dead in its
header and its bytes are punched out of the file (the space returns to the disk
at once); a segment whose records are all dead is unlinked. The records are
self-describing, so the index is rebuilt by reading the headers at start.
"""

import ctypes
import errno
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from aifs.tiers.checksum import Buffer
from aifs.tiers.direct import DIRECT_MIN, AlignedScratch, DirectAppender, round_down, round_up
from aifs.tiers.files import libc, start_writeback, sync_dir

HEADER = struct.Struct("<4sB3xQQ")
MAGIC = b"AIFB"
LIVE, DEAD, STAGED = 1, 0, 2  # STAGED: written for a commit that may not have happened yet
STATE_OFFSET = 4
SEGMENT_BYTES = 256 << 20
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE

log = logging.getLogger(__name__)
libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


@dataclass(frozen=True, slots=True)
class Location:
    """Where a block's bytes sit: segment number, offset of the bytes, their length."""

    segment: int
    offset: int
    length: int

    @property
    def header_offset(self) -> int:
        return self.offset - HEADER.size


class _Segment:
    def __init__(self, path: Path, number: int) -> None:
        self.path = path
        self.number = number
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.size = os.fstat(self.fd).st_size
        self.live = 0
        self.direct: DirectAppender | None = None

    def touched(self, offset: int) -> None:
        """A write through the page cache at `offset` (see DirectAppender.forget_from)."""
        if self.direct is not None:
            self.direct.forget_from(offset)

    def close(self) -> None:
        os.close(self.fd)
        if self.direct is not None:
            self.direct.close()


def _punch(fd: int, start: int, end: int) -> None:
    """Free the whole pages inside [start, end); the filesystem may not support it."""
    first = round_up(start)
    last = round_down(end)
    if last > first and libc.fallocate(fd, _PUNCH_HOLE, first, last - first) != 0:
        if ctypes.get_errno() not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE) failed")


_NOWAIT = getattr(os, "RWF_NOWAIT", 0)  # preadv fails with EAGAIN rather than wait for the disk


def _read_exact(fd: int, length: int, offset: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    buf = bytearray(length)
    buf[:len(data)] = data
    _fill(fd, memoryview(buf)[len(data):], offset + len(data))
    return bytes(buf)


def _fill(fd: int, view: memoryview, offset: int, needed: int | None = None) -> None:
    """Read `needed` bytes (all of `view` by default) at `offset` into `view`; a read may
    return short, and one through O_DIRECT may fill more than needed, up to a page."""
    needed = len(view) if needed is None else needed
    got = 0
    while got < needed:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise OSError(errno.EIO, f"segment ends {needed - got} bytes early at offset {offset}")
        got += n


class SegmentLog:
    """Thread-safe: appends are serialised, reads and kills of distinct records are not.

    With `bypass_cache`, records of DIRECT_MIN bytes or more are appended with O_DIRECT
    (aifs.tiers.direct): for a log whose large records are seldom read back soon and
    whose CPU is shared with more urgent work (a node's write-back staging)."""

    def __init__(self, root: Path, segment_bytes: int = SEGMENT_BYTES, bypass_cache: bool = False) -> None:
        self.root = root
        self.segment_bytes = segment_bytes
        self._segments: dict[int, _Segment] = {}
        self._lock = threading.Lock()
        self._active: _Segment | None = None
        self._unsynced_names = False
        self._direct = bypass_cache  # until the file system refuses O_DIRECT
        self._scratch = AlignedScratch()  # used under the lock only
        self._read_scratch = threading.local()  # one AlignedScratch per reading thread
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, number: int) -> Path:
        return self.root / f"seg-{number:08d}.log"

    def rebuild(self) -> Iterator[tuple[int, Location, bool]]:
        """Open every segment and yield (block id, location, still staged) of each live record."""
        for path in sorted(self.root.glob("seg-*.log")):
            segment = _Segment(path, int(path.stem[4:]))
            self._segments[segment.number] = segment
            yield from self._scan(segment)
            if segment.live == 0:
                self._drop(segment)

    def _scan(self, segment: _Segment) -> Iterator[tuple[int, Location, bool]]:
        pos = 0
        while pos + HEADER.size <= segment.size:
            magic, state, block_id, length = HEADER.unpack(os.pread(segment.fd, HEADER.size, pos))
            end = pos + HEADER.size + length
            if magic != MAGIC or end > segment.size:
                break
            if state in (LIVE, STAGED):
                segment.live += 1
                yield block_id, Location(segment.number, pos + HEADER.size, length), state == STAGED
            pos = end
        if pos < segment.size:  # a record torn by a crash, or the zeros after a direct append, end it
            os.ftruncate(segment.fd, pos)
            segment.size = pos

    def append(self, block_id: int, data: Buffer | list[Buffer], staged: bool = False) -> Location:
        """Append a record of `data` (or of parts, written with one gathering write); a
        `staged` one stays marked so until set_live()."""
        parts = data if isinstance(data, list) else [data]
        length = sum(map(len, parts))
        record = HEADER.size + length
        header = HEADER.pack(MAGIC, STAGED if staged else LIVE, block_id, length)
        with self._lock:
            segment = self._writable(record)
            offset = segment.size
            try:
                buffered = self._write(segment, offset, [header, *parts], record)
            except OSError:
                os.ftruncate(segment.fd, offset)
                raise
            segment.size += record
            segment.live += 1
        if buffered:
            start_writeback(segment.fd, offset, record)
        else:  # set_live and kill rewrite the header, often on the event loop: not with a disk read
            os.pread(segment.fd, HEADER.size, offset)
        return Location(segment.number, offset + HEADER.size, length)

    def _write(self, segment: _Segment, offset: int, parts: list[Buffer], record: int) -> bool:
        """Write a record at the segment's end; True when it went through the page cache."""
        if record >= DIRECT_MIN and self._direct and self._write_direct(segment, offset, parts):
            return False
        segment.touched(offset)
        if os.pwritev(segment.fd, parts, offset) != record:
            raise OSError(errno.ENOSPC, "short write to an NVMe segment")
        return True

    def _write_direct(self, segment: _Segment, offset: int, parts: list[Buffer]) -> bool:
        """A large record bypasses the page cache (aifs.tiers.direct); False when the file
        system refuses O_DIRECT, which is then not tried again."""
        try:
            self._appender(segment).append(partial(_read_exact, segment.fd), offset, parts, self._scratch)
            return True
        except OSError as e:
            return self._refused_direct(e)

    def _appender(self, segment: _Segment) -> DirectAppender:
        """The segment's O_DIRECT descriptor, opened on first use (the caller holds the lock)."""
        if segment.direct is None:
            segment.direct = DirectAppender.open(segment.path)
        return segment.direct

    def _refused_direct(self, error: OSError) -> bool:
        """False, after turning O_DIRECT off for good, when `error` says the file system refuses it."""
        if error.errno != errno.EINVAL:
            raise error
        self._direct = False
        log.warning("%s: the file system refuses O_DIRECT (%s); large blocks go through the page "
                    "cache, which costs more CPU", self.root, error)
        return False

    def _writable(self, record: int) -> _Segment:
        active = self._active
        if active is None or (active.size and active.size + record > self.segment_bytes):
            number = max(self._segments, default=0) + 1
            active = self._active = self._segments[number] = _Segment(self._path(number), number)
            self._unsynced_names = True
        return active

    def read(self, location: Location, offset: int = 0, length: int | None = None) -> bytes:
        """The record's bytes, or `length` of them from `offset` (cut at the record's end)."""
        fd, count, position = self._span(location, offset, length)
        return _read_exact(fd, count, position)

    def read_cached(self, location: Location, offset: int = 0, length: int | None = None) -> bytearray | None:
        """`read`, from the page cache only: None when any of the bytes would need the disk,
        so an event loop serves cached bytes at once and leaves disk reads to a thread."""
        fd, count, position = self._span(location, offset, length)
        buf = bytearray(count)
        try:
            got = os.preadv(fd, [buf], position, _NOWAIT) if _NOWAIT else 0
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno == errno.EOPNOTSUPP:  # a file system without non-blocking reads
                return None
            raise
        return buf if got == count else None

    def _span(self, location: Location, offset: int, length: int | None) -> tuple[int, int, int]:
        """(descriptor, byte count, file position) of `length` bytes from `offset` of the record."""
        offset = min(offset, location.length)
        count = location.length - offset if length is None else min(length, location.length - offset)
        return self._segments[location.segment].fd, count, location.offset + offset

    def read_into(self, location: Location, buf: bytearray) -> None:
        """The record's bytes into `buf`, resized to fit: a buffer reused for records of about
        one size is not reallocated, so its memory is not faulted in afresh each time.

        Where the log bypasses the page cache, a large record is read around it too: it is
        read to be sent away (an upload), its pages in the cache would only push out pages
        that are read again, and copying pages fresh from the disk out of the cache costs a
        virtual machine more CPU than the upload (5.4 s of kernel time per 2 GiB drained,
        against 0.7-0.85 s for O_DIRECT reads into reused memory and a copy from there)."""
        if len(buf) != location.length:
            buf[location.length:] = b""
            buf.extend(bytes(location.length - len(buf)))
        view = memoryview(buf)
        if location.length >= DIRECT_MIN and self._direct and self._read_direct(location, view):
            return
        _fill(self._segments[location.segment].fd, view, location.offset)

    def _read_direct(self, location: Location, dest: memoryview) -> bool:
        """The record's bytes into `dest` by way of an O_DIRECT read of its pages into this
        thread's scratch memory; False when the file system refuses O_DIRECT."""
        segment = self._segments[location.segment]
        start = round_down(location.offset)
        head = location.offset - start
        scratch = getattr(self._read_scratch, "memory", None)
        if scratch is None:
            scratch = self._read_scratch.memory = AlignedScratch()
        pages = scratch.view(round_up(head + location.length))
        try:
            appender = segment.direct
            if appender is None:
                with self._lock:
                    appender = self._appender(segment)
            _fill(appender.fd, pages, start, head + location.length)
        except OSError as e:
            return self._refused_direct(e)
        dest[:] = pages[head:head + location.length]
        return True

    def set_live(self, location: Location) -> None:
        """A staged record is confirmed: it survives the next rebuild whatever the metadata says."""
        with self._lock:
            self._set_state(location, LIVE)

    def _set_state(self, location: Location, state: int) -> _Segment:
        """Rewrite a record's state byte (the caller holds the lock)."""
        segment = self._segments[location.segment]
        segment.touched(location.header_offset)
        os.pwrite(segment.fd, bytes([state]), location.header_offset + STATE_OFFSET)
        return segment

    def kill(self, location: Location) -> None:
        """Mark a record dead and give its space back."""
        with self._lock:
            segment = self._set_state(location, DEAD)
            _punch(segment.fd, location.offset, location.offset + location.length)
            segment.live -= 1
            if segment.live == 0 and segment is not self._active:
                self._drop(segment)

    def _drop(self, segment: _Segment) -> None:
        segment.close()
        segment.path.unlink()
        del self._segments[segment.number]

    def sync(self, segments: set[int]) -> None:
        """fsync the named segments (one fsync covers every block appended to each)."""
        for number in segments:
            segment = self._segments.get(number)
            if segment is not None:
                os.fsync(segment.fd)
        if segments and self._unsynced_names:
            self._unsynced_names = False
            sync_dir(self.root)

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()
        self._active = None
