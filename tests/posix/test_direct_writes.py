"""Write-only opens bypass the page cache (aifs.fuse.cachemode): what every reader sees stays
what a local disk shows, whichever handles are open around the writer."""

import os
import struct

import pytest

from helpers import cached_pages, pattern, read_file, write_file

MiB = 1024 * 1024
CAPABILITY = "security.capability"
NO_CAPABILITIES = struct.pack("<5I", 0x02000000, 0, 0, 0, 0)  # VFS_CAP_REVISION_2, empty sets


def _written(path, flags: int, data: bytes) -> int:
    """Pages of the file in the page cache right after writing `data` through a new handle."""
    fd = os.open(path, flags | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        return cached_pages(fd)
    finally:
        os.close(fd)


def test_write_only_opens_leave_no_pages_in_the_cache(mounted, d):
    data = pattern("direct", MiB)
    assert _written(d / "direct", os.O_WRONLY, data) == 0
    assert _written(d / "read-write", os.O_RDWR, data) == MiB // 4096
    (d / "cached").mkdir()  # the test volume's rule: direct_writes = false here
    assert _written(d / "cached" / "f", os.O_WRONLY, data) == MiB // 4096
    write_file(d / "setid", b"")
    os.chmod(d / "setid", 0o4755)  # the kernel must drop set-id bits on a write: cached
    assert _written(d / "setid", os.O_WRONLY, data) == MiB // 4096
    assert read_file(d / "direct") == data == read_file(d / "cached" / "f")


def test_a_direct_write_replaces_pages_cached_before_it(d):
    p = d / "f"
    old, new = pattern("old", 2 * MiB), pattern("new", 100_000)
    write_file(p, old)
    assert read_file(p) == old  # now in the page cache
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, new, 4096)
    os.close(fd)
    assert read_file(p) == old[:4096] + new + old[4096 + len(new):]


def test_a_reader_opened_beside_a_writer_sees_every_write(d):
    p = d / "f"
    writer = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    reader = None
    try:
        os.write(writer, pattern("first", 300_000))
        reader = os.open(p, os.O_RDONLY)
        assert os.pread(reader, 300_000, 0) == pattern("first", 300_000)
        os.pwrite(writer, pattern("second", 5000), 70_000)
        assert os.pread(reader, 5000, 70_000) == pattern("second", 5000)
        os.write(writer, b"tail")
        assert os.pread(reader, 10, 300_000) == b"tail"
        assert os.fstat(reader).st_size == 300_004
    finally:
        os.close(writer)
        if reader is not None:
            os.close(reader)


def test_a_writer_opened_beside_a_cached_reader_keeps_it_current(d):
    p = d / "f"
    write_file(p, pattern("old", MiB))
    reader = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(reader, MiB, 0) == pattern("old", MiB)  # cached
        fd = os.open(p, os.O_WRONLY)
        os.pwrite(fd, b"fresh", 123)
        os.close(fd)
        assert os.pread(reader, 5, 123) == b"fresh"
    finally:
        os.close(reader)


def test_a_direct_write_updates_mtime_and_size_at_once(d):
    p = d / "f"
    write_file(p, b"abc")
    os.utime(p, ns=(10**18, 10**18))
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"xyz", 10)
        st = os.stat(p)
    finally:
        os.close(fd)
    assert st.st_size == 13
    assert st.st_mtime_ns != 10**18 and st.st_atime_ns == 10**18


def test_a_write_drops_file_capabilities(d):
    p = d / "f"
    write_file(p, b"#!/bin/true\n", mode=0o755)
    try:
        os.setxattr(p, CAPABILITY, NO_CAPABILITIES)
    except OSError as e:
        pytest.skip(f"{CAPABILITY} cannot be set here: {e}")
    assert CAPABILITY in os.listxattr(p)
    fd = os.open(p, os.O_WRONLY)
    os.write(fd, b"#")
    os.close(fd)
    assert CAPABILITY not in os.listxattr(p)
