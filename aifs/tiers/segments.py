"""Append-only segment files that hold many blocks each.

Creating a file per block costs a few hundred microseconds on ext4; appending to
an open file costs a few. So the NVMe tier appends each block as a record
(header + bytes) to the active segment. A deleted record is marked dead in its
header and its bytes are punched out of the file (the space returns to the disk
at once); a segment whose records are all dead is unlinked. The records are
self-describing, so the index is rebuilt by reading the headers at start
(aifs.tiers.records). A damaged header does not end its segment: the records
after it are settled by the log's owner, who knows which blocks it still needs
(aifs.tiers.salvage).
"""

import ctypes
import errno
import logging
import os
import threading
from collections.abc import Container, Iterator, Mapping
from functools import partial
from pathlib import Path

from aifs.tiers.checksum import Buffer
from aifs.tiers.direct import DIRECT_MIN, AlignedScratch, DirectAppender, round_down, round_up
from aifs.tiers.files import libc, start_writeback, sync_dir
from aifs.tiers.records import (
    DEAD, HEADER, LIVE, OLD_HEADER, STAGED, STATE_OFFSET, Header, Location, all_zeros, find_headers,
    pack_header, parse_header,
)
from aifs.tiers.salvage import DamagedRegion, Found, Salvage, SegmentDamage, Settler, Trusted

__all__ = ["HEADER", "DamagedRegion", "Found", "Location", "Salvage", "SegmentLog"]

SEGMENT_BYTES = 256 << 20
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE

log = logging.getLogger(__name__)
libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


class _Segment:
    def __init__(self, path: Path, number: int, read_only: bool = False) -> None:
        self.path = path
        self.number = number
        self.fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o600)
        self.size = os.fstat(self.fd).st_size
        self.live = 0
        self.damaged = 0  # damaged regions left in it (1 while unsettled): it is kept while any are
        self.direct: DirectAppender | None = None

    def touched(self, offset: int) -> None:
        """A write through the page cache at `offset` (see DirectAppender.forget_from)."""
        if self.direct is not None:
            self.direct.forget_from(offset)

    def close(self) -> None:
        os.close(self.fd)
        if self.direct is not None:
            self.direct.close()


class _HeaderReader:
    """The record headers of a segment, read at start: records smaller than SCAN_WINDOW come
    many to a read, where one read per header costs a disk access each on a cold page cache;
    after a large record only its header is read, so a segment of whole blocks is not read
    through."""

    SCAN_WINDOW = 64 << 10

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._window = b""
        self._window_at = 0

    def at(self, pos: int) -> bytes:
        """HEADER.size bytes from `pos` (fewer at the end of the file)."""
        start = pos - self._window_at
        if start < 0 or start + HEADER.size > len(self._window):
            wide = 0 <= start <= self.SCAN_WINDOW  # the last record was small: the next ones likely are too
            self._window = os.pread(self._fd, self.SCAN_WINDOW if wide else HEADER.size, pos)
            self._window_at, start = pos, 0
        return self._window[start:start + HEADER.size]


def _punch(fd: int, start: int, end: int) -> None:
    """Free the whole pages inside [start, end); the filesystem may not support it."""
    first = round_up(start)
    last = round_down(end)
    if last > first and libc.fallocate(fd, _PUNCH_HOLE, first, last - first) != 0:
        if ctypes.get_errno() not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE) failed")


RUN_PARTS = 1024  # IOV_MAX on Linux: the most buffers one gathering write takes
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
    whose CPU is shared with more urgent work (a node's write-back staging).

    A `read_only` log changes nothing on disk (fsck without --repair): no folder is
    made, no torn tail cut, no empty segment unlinked, and appends are refused."""

    def __init__(self, root: Path, segment_bytes: int = SEGMENT_BYTES, bypass_cache: bool = False,
                 read_only: bool = False) -> None:
        self.root = root
        self.segment_bytes = segment_bytes
        self.read_only = read_only
        self._segments: dict[int, _Segment] = {}
        self._lock = threading.Lock()
        self._active: _Segment | None = None
        self._unsynced_names = False
        self._direct = bypass_cache  # until the file system refuses O_DIRECT
        self._scratch = AlignedScratch()  # used under the lock only
        self._read_scratch = threading.local()  # one AlignedScratch per reading thread
        self._damage: list[SegmentDamage] = []  # left by rebuild() for settle()
        if not read_only:
            root.mkdir(parents=True, exist_ok=True)

    def segment_path(self, number: int) -> Path:
        return self.root / f"seg-{number:08d}.log"

    def rebuild(self) -> Iterator[tuple[int, Location, bool]]:
        """Open every segment and yield (block id, location, still staged) of each live record
        up to the first damaged header of its segment; the rest waits for settle()."""
        for path in sorted(self.root.glob("seg-*.log")):
            segment = _Segment(path, int(path.stem[4:]), self.read_only)
            self._segments[segment.number] = segment
            yield from self._scan(segment)
            self._drop_if_unused(segment)

    @property
    def damaged(self) -> bool:
        """Whether rebuild() found damaged headers that settle() has not settled yet."""
        return bool(self._damage)

    def _scan(self, segment: _Segment) -> Iterator[tuple[int, Location, bool]]:
        headers = _HeaderReader(segment.fd)
        pos = 0
        while pos < segment.size:
            header = parse_header(headers.at(pos))
            if header is None or pos + header.size + header.length > segment.size:
                self._broken(segment, pos, header)
                return
            if header.state != DEAD:
                segment.live += 1
                location = Location(segment.number, pos + header.size, header.length, header.size)
                yield header.block_id, location, header.state == STAGED
            pos += header.size + header.length

    def _broken(self, segment: _Segment, pos: int, header: Header | None) -> None:
        """The walk through a segment stopped short of its end. A record torn by a crash, or
        the zeros after a direct append, end it and are cut off; anything else is damage."""
        if header is not None:
            log.warning("%s: the record of block %016x at offset %d is torn: %d of its %d bytes "
                        "are there%s", segment.path, header.block_id, pos, segment.size - pos - header.size,
                        header.length, "" if self.read_only else "; cut it off")
            self._cut(segment, pos)
        elif all_zeros(segment.fd, pos, segment.size):
            self._cut(segment, pos)
        else:
            log.warning("%s: the record header at offset %d is damaged; the records after it are "
                        "settled against what the owner knows of its blocks", segment.path, pos)
            segment.damaged = 1
            headers = find_headers(segment.fd, pos + 1, segment.size)
            self._damage.append(SegmentDamage(segment.path, segment.number, segment.size, pos, headers))

    def _cut(self, segment: _Segment, pos: int) -> None:
        if not self.read_only:
            os.ftruncate(segment.fd, pos)
            segment.size = pos

    def settle(self, trusted: Trusted, wanted: Mapping[int, int], lengths: Mapping[int, int],
               held: Container[int]) -> Salvage:
        """Settle what rebuild() left past damaged headers (aifs.tiers.salvage): records
        `trusted` verifies, records of `wanted` blocks (id -> checksum; `lengths` by id where
        known) behind damaged headers, and the damaged regions between them. Blocks in
        `held` already have a copy and are never taken again. Only counts are changed:
        the caller indexes the records, rewrites the recovered headers (rewrite_header) and
        neutralises the regions it can spare (neutralise); a segment is kept while it has
        regions left."""
        settler = Settler(trusted, wanted, lengths, held)
        salvage = Salvage()
        for damage in self._damage:
            segment = self._segments[damage.segment]
            found = settler.walk(damage, partial(os.pread, segment.fd))
            self._cut_zero_tail(segment, found)
            segment.live += len(found.records) + len(found.recovered)
            segment.damaged = len(found.regions)
            self._drop_if_unused(segment)
            salvage.extend(found)
        self._damage.clear()
        return salvage

    def _cut_zero_tail(self, segment: _Segment, found: Salvage) -> None:
        """Zeros at the end of a segment are what a direct append leaves, not damage."""
        tail = found.regions[-1] if found.regions else None
        if tail is not None and tail.end == segment.size and all_zeros(segment.fd, tail.start, tail.end):
            found.regions.pop()
            self._cut(segment, tail.start)

    def rewrite_header(self, found: Found) -> None:
        """Give a recovered record a sound header again: live, for its block is committed."""
        location = found.location
        header = pack_header(found.block_id, location.length, LIVE, location.header)
        with self._lock:
            segment = self._segments[location.segment]
            segment.touched(location.header_offset)
            os.pwrite(segment.fd, header, location.header_offset)
            os.fsync(segment.fd)

    def neutralise(self, region: DamagedRegion) -> str:
        """Make a damaged region harmless: cut off at the end of its segment, else turned into
        one dead record whose bytes are punched out. Says what was done."""
        with self._lock:
            segment = self._segments[region.segment]
            if region.end >= segment.size:
                self._cut(segment, region.start)
                done = "cut off"
            else:
                done = self._mark_dead(segment, region)
            os.fsync(segment.fd)
            segment.damaged -= 1
            self._drop_if_unused(segment)
        return done

    def _mark_dead(self, segment: _Segment, region: DamagedRegion) -> str:
        span = region.end - region.start
        size = HEADER.size if span >= HEADER.size else OLD_HEADER.size
        if span < size:
            return f"left as it is: {span} bytes are too few for a header"
        segment.touched(region.start)
        os.pwrite(segment.fd, pack_header(0, span - size, DEAD, size), region.start)
        _punch(segment.fd, region.start + size, region.end)
        return "marked dead"

    def append(self, block_id: int, data: Buffer | list[Buffer], staged: bool = False) -> Location:
        """Append a record of `data` (or of parts, written with one gathering write); a
        `staged` one stays marked so until set_live()."""
        parts = data if isinstance(data, list) else [data]
        return self.append_run([(block_id, parts)], staged)[0]

    def append_run(self, records: list[tuple[int, list[Buffer]]], staged: bool = False,
                   around_cache: bool = False) -> list[Location]:
        """Append the first of `records` and as many after it as fit in the same segment end
        to end, with one write (at most RUN_PARTS buffers); their locations, in order. The
        caller appends the rest with further calls. Where the log bypasses the page cache, the
        write goes around it from DIRECT_MIN bytes up, or at any size `around_cache`."""
        if self.read_only:
            raise OSError(errno.EROFS, f"{self.root}: the segment log is open read-only")
        with self._lock:
            segment = self._writable(HEADER.size + sum(map(len, records[0][1])))
            offset = segment.size
            parts, locations = self._gather(segment, records, STAGED if staged else LIVE)
            end = locations[-1].offset + locations[-1].length
            try:
                buffered = self._write(segment, offset, parts, end - offset, around_cache)
            except OSError:
                os.ftruncate(segment.fd, offset)
                raise
            segment.size = end
            segment.live += len(locations)
        if buffered:
            start_writeback(segment.fd, offset, end - offset)
        else:  # set_live and kill rewrite headers, often on the event loop: not with a disk read
            for location in locations:  # a staged record's set_live comes soon; a kill comes later
                if staged:
                    os.pread(segment.fd, HEADER.size, location.header_offset)
                else:
                    os.posix_fadvise(segment.fd, location.header_offset, HEADER.size, os.POSIX_FADV_WILLNEED)
        return locations

    def _gather(self, segment: _Segment, records: list[tuple[int, list[Buffer]]],
                state: int) -> tuple[list[Buffer], list[Location]]:
        """The headers and bytes of the first record and of those after it that fit in the
        segment and in one write, and where each will be."""
        end = segment.size
        parts: list[Buffer] = []
        locations: list[Location] = []
        for block_id, data in records:
            length = sum(map(len, data))
            fits = end + HEADER.size + length <= self.segment_bytes and len(parts) + 1 + len(data) <= RUN_PARTS
            if locations and not fits:
                break
            parts += [pack_header(block_id, length, state), *data]
            locations.append(Location(segment.number, end + HEADER.size, length))
            end += HEADER.size + length
        return parts, locations

    def _write(self, segment: _Segment, offset: int, parts: list[Buffer], nbytes: int, around_cache: bool) -> bool:
        """Write records (`nbytes` in all) at the segment's end; True when they went through
        the page cache."""
        direct = (around_cache or nbytes >= DIRECT_MIN) and self._direct
        if direct and self._write_direct(segment, offset, parts):
            return False
        segment.touched(offset)
        if os.pwritev(segment.fd, parts, offset) != nbytes:
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
            active = self._active = self._segments[number] = _Segment(self.segment_path(number), number)
            self._unsynced_names = True
        return active

    def read(self, location: Location, offset: int = 0, length: int | None = None) -> bytes:
        """The record's bytes, or `length` of them from `offset` (cut at the record's end).
        A large record read whole is read around the page cache, as `read_into` says why."""
        if offset == 0 and (length is None or length >= location.length) and self._bypasses(location):
            pages = self._read_direct(location)
            if pages is not None:
                return bytes(pages)
        fd, count, position = self._span(location, offset, length)
        return _read_exact(fd, count, position)

    def read_cached(self, location: Location, offset: int = 0, length: int | None = None) -> bytearray | None:
        """`read`, from the page cache (RWF_NOWAIT): None when the kernel would have to wait
        for the disk, so an event loop serves cached bytes at once and leaves disk reads to a
        thread. Kernels may still read a few missing pages in themselves before answering."""
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
        read whole to be sent away (an upload) or kept elsewhere (the RAM tier, the kernel's
        cache of the mount), so its pages in this file's cache would only be a second copy
        that pushes out pages read again; and copying pages fresh from the disk out of the
        cache costs a virtual machine more CPU than the O_DIRECT read into reused memory
        and the copy from there (docs/benchmarks.md, "Local I/O")."""
        if len(buf) != location.length:
            buf[location.length:] = b""
            buf.extend(bytes(location.length - len(buf)))
        view = memoryview(buf)
        pages = self._read_direct(location) if self._bypasses(location) else None
        if pages is not None:
            view[:] = pages
            return
        _fill(self._segments[location.segment].fd, view, location.offset)

    def _bypasses(self, location: Location) -> bool:
        return location.length >= DIRECT_MIN and self._direct

    def _read_direct(self, location: Location) -> memoryview | None:
        """The record's bytes, read with O_DIRECT into this thread's scratch memory (valid
        until the thread's next such read); None when the file system refuses O_DIRECT."""
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
            self._refused_direct(e)
            return None
        return pages[head:head + location.length]

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
            self._drop_if_unused(segment)

    def _drop_if_unused(self, segment: _Segment) -> None:
        """Unlink a segment with nothing left in it: no live record, no damaged region."""
        if (segment.live == 0 and not segment.damaged and segment is not self._active
                and not self.read_only):
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
