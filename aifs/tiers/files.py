"""Whole objects as files, and the syncs that make them durable."""

import ctypes
import ctypes.util
import os
from pathlib import Path

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing a range to disk without waiting (sync_file_range WRITE), so dirty
    pages do not pile up until an fsync or the kernel's dirty limits stall every writer.
    Best effort: a failure leaves the pages to the normal writeback."""
    libc.sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def read_file(path: Path, offset: int = 0, length: int = -1) -> bytes | None:
    """The file's bytes (`length` of them from `offset`), or None when it does not exist."""
    try:
        with open(path, "rb", buffering=0) as f:
            if offset:
                f.seek(offset)
            return f.readall() if length < 0 else _read_up_to(f, length)
    except FileNotFoundError:
        return None


def _read_up_to(f, length: int) -> bytes:
    """`length` bytes, fewer only at the end of the file (a raw read may return short)."""
    parts = []
    while length > 0 and (part := f.read(length)):
        parts.append(part)
        length -= len(part)
    return b"".join(parts)


def write_file(path: Path, data: bytes) -> int:
    """Write (or rewrite) an object in place; returns the size it had before (0 if new).

    A write torn by a crash is harmless: objects are immutable, their upload is
    still queued until a later flush, and the retry rewrites them whole.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        previous = os.fstat(fd).st_size
        if previous:
            os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return previous


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """syncfs(2): one call makes every earlier write to that filesystem durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def remove_file(path: Path) -> int:
    """Delete an object file; returns the bytes it held (0 when it was not there)."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def make_fanout(root: Path) -> None:
    for i in range(256):
        (root / f"{i:02x}").mkdir(parents=True, exist_ok=True)
