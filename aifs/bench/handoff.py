"""A checkpoint written on one node and read on another: when can the other node have it?

The writer's ranks, released together, each write one file (4 MiB writes, fsync, close),
as the checkpoint workload does. As soon as the last close returns, as many readers on
another node read the files from first byte to last and compare every byte with what was
written: each 4 MiB piece carries its rank and offset, so a piece served from the wrong
place is caught as surely as a wrong byte. A read that fails (the bytes are not there yet:
EIO) is tried again until READ_TIMEOUT_S; wrong or missing bytes end the bench.

Two numbers, both in seconds from the writers' release: `checkpoint-close`, until the last
close returned (how long the GPUs wait), and `checkpoint-readable`, until the other node
had read all of it, identical. The files are deleted afterwards.
"""

import errno
import os
import shutil
import struct
import time
from functools import partial
from pathlib import Path

from aifs.bench.checkpoint import all_at_once
from aifs.bench.fileio import write_all
from aifs.bench.measure import MiB
from aifs.bench.workload import BenchError, Result

RANKS = 4
FILE_SIZE = 256 * MiB
IO_SIZE = 4 * MiB
READ_TIMEOUT_S = 600.0
RETRY_S = 0.05
STAMP = struct.Struct("<QQ")  # rank, offset: at the start of every piece


def _piece(pattern: bytes, rank: int, offset: int, size: int) -> bytes:
    """The bytes of the rank's file at `offset`: the pattern, stamped, cut at the file's end."""
    return (STAMP.pack(rank, offset) + pattern[STAMP.size:])[:size - offset]


def _write_rank(path: Path, size: int, pattern: bytes, rank: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for offset in range(0, size, len(pattern)):
            write_all(fd, _piece(pattern, rank, offset, size))
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_rank(path: Path, size: int, pattern: bytes, rank: int, deadline: float) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in range(0, size, len(pattern)):
            want = _piece(pattern, rank, offset, size)
            got = _pread_when_there(fd, path, len(want), offset, deadline)
            if got != want:
                raise BenchError(f"{path} read on another node: bytes {offset}-{offset + len(want)} differ "
                                 f"from what was written ({len(got)} bytes read)")
        if os.pread(fd, 1, size):
            raise BenchError(f"{path} read on another node is longer than the {size} bytes written")
    finally:
        os.close(fd)


def _pread_when_there(fd: int, path: Path, length: int, offset: int, deadline: float) -> bytes:
    """One pread; an EIO (the bytes are not on any tier this node reaches yet) is tried again."""
    while True:
        try:
            return os.pread(fd, length, offset)
        except OSError as error:
            if error.errno != errno.EIO or time.monotonic() > deadline:
                raise BenchError(f"reading {path} on another node, at byte {offset}: {error}") from error
        time.sleep(RETRY_S)


def handoff(writer: Path, reader: Path, size: int) -> dict[str, Result]:
    """RANKS files of `size` bytes written through mountpoint `writer`, read through `reader`."""
    (writer / "handoff").mkdir()
    pattern = os.urandom(IO_SIZE)
    ranks = range(RANKS)
    close_ns = all_at_once([partial(_write_rank, writer / "handoff" / f"rank{rank}.pt", size, pattern, rank)
                            for rank in ranks])
    deadline = time.monotonic() + READ_TIMEOUT_S
    read_ns = all_at_once([partial(_read_rank, reader / "handoff" / f"rank{rank}.pt", size, pattern, rank,
                                   deadline) for rank in ranks])
    shutil.rmtree(writer / "handoff")
    return {"checkpoint-close": Result(close_ns / 1e9, "s"),
            "checkpoint-readable": Result((close_ns + read_ns) / 1e9, "s")}
