"""Sparse files, st_blocks, and files/offsets beyond 4 GiB."""

import os

from helpers import pattern, read_file, write_file

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def test_hole_reads_as_zeros(d):
    p = d / "sparse"
    with open(p, "wb") as f:
        f.write(b"head")
        f.seek(3 * MiB)
        f.write(b"tail")
    data = read_file(p)
    assert len(data) == 3 * MiB + 4
    assert data[:4] == b"head"
    assert data[4:3 * MiB] == bytes(3 * MiB - 4)
    assert data[-4:] == b"tail"


def test_hole_inside_block_and_across_blocks(d):
    p = d / "f"
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"A" * 100, 0)
        os.pwrite(fd, b"B" * 100, 1000)          # small hole inside one block
        os.pwrite(fd, b"C" * 100, 9 * MiB + 5)  # hole spanning whole blocks
        assert os.pread(fd, 900, 100) == bytes(900)
        assert os.pread(fd, 200, 9 * MiB - 100) == bytes(105) + b"C" * 95
        assert os.fstat(fd).st_size == 9 * MiB + 105
    finally:
        os.close(fd)


def test_huge_hole_costs_no_blocks(d):
    p = d / "huge"
    with open(p, "wb") as f:
        f.seek(1 * GiB)
        f.write(b"end")
        f.flush()
        os.fsync(f.fileno())
    st = os.stat(p)
    assert st.st_size == GiB + 3
    assert st.st_blocks * 512 < 16 * MiB, st.st_blocks
    with open(p, "rb") as f:
        f.seek(512 * MiB)
        assert f.read(4096) == bytes(4096)
        f.seek(GiB - 1)
        assert f.read() == b"\0end"


def test_truncate_up_makes_hole_without_blocks(d):
    p = d / "t"
    write_file(p, b"")
    os.truncate(p, 2 * GiB)
    st = os.stat(p)
    assert st.st_size == 2 * GiB
    assert st.st_blocks * 512 < MiB, st.st_blocks


def test_st_blocks_counts_written_data(d):
    p = d / "dense"
    write_file(p, pattern("dense", 8 * MiB), fsync=True)
    st = os.stat(p)
    # allocated space covers the data (a filesystem may round up, not down)
    assert st.st_blocks * 512 >= 8 * MiB, st.st_blocks
    assert st.st_blocks * 512 < 16 * MiB, st.st_blocks


def test_st_blocks_after_truncate_down(d):
    p = d / "shrink"
    write_file(p, pattern("s", 8 * MiB), fsync=True)
    os.truncate(p, 4096)
    st = os.stat(p)
    assert st.st_blocks * 512 < 5 * MiB, st.st_blocks


def test_file_beyond_4gib(d):
    p = d / "big"
    off = 5 * GiB
    data = pattern("beyond", 1 * MiB + 17)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert os.pwrite(fd, data, off) == len(data)
        os.pwrite(fd, b"low", 100)
        os.fsync(fd)
        assert os.fstat(fd).st_size == off + len(data)
        assert os.pread(fd, len(data), off) == data
        assert os.pread(fd, 10, off - 5) == bytes(5) + data[:5]
        assert os.pread(fd, 3, 100) == b"low"
        # around the 32-bit boundary
        os.pwrite(fd, b"edge", 2**32 - 2)
        assert os.pread(fd, 8, 2**32 - 4) == b"\0\0edge\0\0"
    finally:
        os.close(fd)
    st = os.stat(p)
    assert st.st_size == off + len(data)
    assert st.st_blocks * 512 < 64 * MiB
    with open(p, "rb") as f:
        f.seek(off)
        assert f.read() == data


def test_truncate_beyond_4gib_and_back(d):
    p = d / "t"
    write_file(p, b"abc")
    os.truncate(p, 6 * GiB + 1)
    assert os.stat(p).st_size == 6 * GiB + 1
    with open(p, "rb") as f:
        f.seek(6 * GiB - 10)
        assert f.read() == bytes(11)
    os.truncate(p, 2)
    assert read_file(p) == b"ab"


def test_append_at_large_offset(d):
    p = d / "a"
    write_file(p, b"")
    os.truncate(p, 4 * GiB + 3)
    with open(p, "ab") as f:
        f.write(b"appended")
    with open(p, "rb") as f:
        f.seek(4 * GiB)
        assert f.read() == b"\0\0\0appended"
