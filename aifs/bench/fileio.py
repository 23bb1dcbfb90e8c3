"""Plain-POSIX file primitives shared by workloads.

Every transfer is checked, so a filesystem that returns short data fails the bench
instead of posting an impossibly good number.
"""

import os
import time

from aifs.bench.measure import Stopwatch, mib_per_second
from aifs.bench.workload import BenchError


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data`: one write normally, more only if the filesystem writes short."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_synced(path: str, size: int, chunk: memoryview) -> None:
    """Create `path` with `size` bytes written `len(chunk)` at a time, fsync it and close it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for offset in range(0, size, len(chunk)):
            write_all(fd, chunk[: size - offset])
        os.fsync(fd)
    finally:
        os.close(fd)


def create_file(path: str, data: bytes) -> None:
    """Create `path` (it must not exist yet) holding `data`, and close it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def read_small_file(path: str, size: int) -> None:
    """Open, read and close a file of `size` bytes: one open, one read, one close."""
    fd = os.open(path, os.O_RDONLY)
    try:
        got = len(os.read(fd, size + 1))
    finally:
        os.close(fd)
    expect_size(path, got, size)


def read_sequential(path: str, io_size: int) -> int:
    """Read a whole file front to back in `io_size` reads into one buffer; return the bytes read."""
    buffer = bytearray(io_size)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while n := os.readv(fd, [buffer]):
            total += n
    finally:
        os.close(fd)
    return total


def read_rate(path: str, size: int, io_size: int) -> float:
    """MiB/s of one front-to-back read of a file that must hold `size` bytes."""
    with Stopwatch() as watch:
        got = read_sequential(path, io_size)
    expect_size(path, got, size)
    return mib_per_second(size, watch.ns)


def pread_latencies(path: str, offsets: list[int], length: int) -> list[int]:
    """Nanoseconds of one `length`-byte pread at each offset, on one fd with the kernel's
    readahead off (POSIX_FADV_RANDOM): each sample is one lookup, not a prefetched page.
    perf_counter_ns inline, as a context manager would add its own cost."""
    latencies = []
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for offset in offsets:
            start = time.perf_counter_ns()
            got = len(os.pread(fd, length, offset))
            latencies.append(time.perf_counter_ns() - start)
            expect_size(path, got, length)
    finally:
        os.close(fd)
    return latencies


def forget_pages(path: str) -> None:
    """Drop one file's pages from the kernel's page cache, so its next reads reach the
    filesystem even where dropping every cache was refused (and without disturbing others)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def expect_size(path: str, got: int, want: int) -> None:
    """Fail the bench when a read returned a different amount than was written."""
    if got != want:
        raise BenchError(f"{path}: read {got} bytes, expected {want}")
