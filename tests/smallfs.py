"""A small tmpfs that a test fills up and frees again: the metadata disk running out of space.

Mounting needs root; the tests that use it skip without. Every mount made here is
unmounted at teardown (lazily, should the test leave a file open on it).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = ".filler"
CHUNK = 64 << 10


class SmallFs:
    def __init__(self, path: Path, size: str = "8m") -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                       check=True, capture_output=True)

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> None:
        """Take every free byte with one file (a page at a time at the end)."""
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (CHUNK, 4096):
                while True:
                    try:
                        os.write(fd, bytes(size))
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        assert self.free_bytes() < 4096

    def free(self) -> None:
        """Give the space back."""
        os.unlink(self.path / FILLER)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)


@contextmanager
def small_fs_at(path: Path, size: str = "8m") -> Iterator[SmallFs]:
    """A SmallFs at `path` for the length of the block; skips the test without root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    fs = SmallFs(path, size)
    try:
        yield fs
    finally:
        fs.unmount()
