"""create/open/read/write/flush/fsync/release, open flags, unlink, truncate, names."""

import errno
import os

import pytest

from helpers import expect_errno, pattern, read_file, run_parallel, write_file

MiB = 1024 * 1024


def test_create_write_read(d):
    p = d / "f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o640)
    assert os.write(fd, b"hello ") == 6
    assert os.write(fd, b"world") == 5
    os.close(fd)
    assert read_file(p) == b"hello world"
    st = os.stat(p)
    assert st.st_size == 11
    assert st.st_mode & 0o777 == 0o640
    assert st.st_nlink == 1


def test_create_in_missing_dir_and_open_missing(d):
    expect_errno(errno.ENOENT, os.open, d / "nodir" / "f", os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.ENOENT, os.open, d / "missing", os.O_RDONLY)
    write_file(d / "file", b"x")
    expect_errno(errno.ENOTDIR, os.open, d / "file" / "f", os.O_CREAT | os.O_WRONLY)


def test_pread_pwrite_offsets(d):
    p = d / "f"
    data = pattern("pw", 100_000)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        assert os.pread(fd, 10, 5) == data[5:15]
        assert os.pread(fd, 100, 99_950) == data[99_950:]
        assert os.pread(fd, 100, 200_000) == b""
        os.pwrite(fd, b"XYZ", 50_000)
        assert os.pread(fd, 5, 49_999) == data[49_999:50_000] + b"XYZ" + data[50_003:50_004]
    finally:
        os.close(fd)
    expected = bytearray(data)
    expected[50_000:50_003] = b"XYZ"
    assert read_file(p) == bytes(expected)


def test_large_write_across_blocks(d):
    """9 MiB + a bit of random data, written in uneven pieces, read back equal."""
    p = d / "big"
    data = pattern("big", 9 * MiB + 12345)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    pos = 0
    for size in [1, 4095, 1 * MiB + 3, 3 * MiB, 700_001]:
        os.write(fd, data[pos:pos + size])
        pos += size
    os.write(fd, data[pos:])
    os.fsync(fd)
    os.close(fd)
    assert os.stat(p).st_size == len(data)
    assert read_file(p) == data
    fd = os.open(p, os.O_RDONLY)
    try:
        edge = 4 * MiB
        assert os.pread(fd, 100, edge - 50) == data[edge - 50:edge + 50]
    finally:
        os.close(fd)


def test_overwrite_middle_of_block(d):
    p = d / "f"
    data = bytearray(pattern("ow", 3 * MiB))
    write_file(p, bytes(data))
    with open(p, "r+b") as f:
        f.seek(MiB + 7)
        f.write(b"\0" * 1000)
    data[MiB + 7:MiB + 1007] = b"\0" * 1000
    assert read_file(p) == bytes(data)


def test_read_sees_write_of_other_fd(d):
    p = d / "f"
    write_file(p, b"aaaa")
    r = os.open(p, os.O_RDONLY)
    w = os.open(p, os.O_WRONLY)
    try:
        assert os.pread(r, 4, 0) == b"aaaa"
        os.pwrite(w, b"bb", 1)
        assert os.pread(r, 4, 0) == b"abba"
        os.pwrite(w, b"cc", 4)
        assert os.pread(r, 10, 0) == b"abbacc"
        assert os.fstat(r).st_size == 6
    finally:
        os.close(r)
        os.close(w)


def test_o_append(d):
    p = d / "f"
    write_file(p, b"start")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    other = os.open(p, os.O_WRONLY)
    try:
        os.write(fd, b"-1")
        os.pwrite(other, b"XYZ", 7)  # grows the file behind fd's back
        os.write(fd, b"-2")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12
    finally:
        os.close(fd)
        os.close(other)
    assert read_file(p) == b"start-1XYZ-2"


def test_o_trunc(d):
    p = d / "f"
    write_file(p, pattern("t", 5 * MiB))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    assert os.fstat(fd).st_size == 0
    os.write(fd, b"new")
    os.close(fd)
    assert read_file(p) == b"new"
    # O_TRUNC on a read-only open of a file we may write still truncates
    os.close(os.open(p, os.O_RDONLY | os.O_TRUNC))
    assert os.stat(p).st_size == 0


@pytest.mark.parametrize("how", ["o_trunc", "truncate", "ftruncate"])
def test_grow_after_truncate_to_zero_reads_zeros(d, how):
    """Old bytes must not reappear in the hole when a truncated file grows again."""
    p = d / "f"
    write_file(p, b"A" * 100)
    if how == "o_trunc":
        os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
    elif how == "truncate":
        os.truncate(p, 0)
    else:
        fd = os.open(p, os.O_WRONLY)
        os.ftruncate(fd, 0)
        os.close(fd)
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"Z", 4096)
    finally:
        os.close(fd)
    assert read_file(p) == bytes(4096) + b"Z"


def test_o_excl(d):
    p = d / "f"
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    expect_errno(errno.EEXIST, os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.mkdir(d / "dir")
    expect_errno(errno.EEXIST, os.open, d / "dir", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.symlink("nowhere", d / "dangling")
    # O_EXCL does not follow a symlink, even a dangling one
    expect_errno(errno.EEXIST, os.open, d / "dangling", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    assert not os.path.lexists(d / "nowhere")


def test_o_creat_existing_keeps_content(d):
    p = d / "f"
    write_file(p, b"keep")
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
    assert read_file(p) == b"keep"
    assert os.stat(p).st_mode & 0o777 == 0o644


def test_open_directory_errors(d):
    os.mkdir(d / "dir")
    write_file(d / "f", b"")
    expect_errno(errno.EISDIR, os.open, d / "dir", os.O_WRONLY)
    expect_errno(errno.EISDIR, os.open, d / "dir", os.O_RDWR)
    expect_errno(errno.ENOTDIR, os.open, d / "f", os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(d / "dir", os.O_RDONLY | os.O_DIRECTORY)
    try:
        expect_errno(errno.EISDIR, os.read, fd, 10)
    finally:
        os.close(fd)


def test_read_write_mode_enforced(d):
    p = d / "f"
    write_file(p, b"data")
    fd = os.open(p, os.O_RDONLY)
    try:
        expect_errno(errno.EBADF, os.write, fd, b"x")
    finally:
        os.close(fd)
    fd = os.open(p, os.O_WRONLY)
    try:
        expect_errno(errno.EBADF, os.read, fd, 1)
    finally:
        os.close(fd)


def test_fsync_fdatasync_flush(d):
    p = d / "f"
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"x" * 10000)
        os.fsync(fd)
        os.write(fd, b"y" * 10)
        os.fdatasync(fd)
        assert os.fstat(fd).st_size == 10010
    finally:
        os.close(fd)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # fsync of a directory is allowed
    finally:
        os.close(dfd)
    assert read_file(p) == b"x" * 10000 + b"y" * 10


def test_unlink(d):
    p = d / "f"
    write_file(p, b"x")
    os.unlink(p)
    assert not os.path.lexists(p)
    expect_errno(errno.ENOENT, os.unlink, p)
    os.mkdir(d / "dir")
    expect_errno(errno.EISDIR, os.unlink, d / "dir")
    assert os.listdir(d) == ["dir"]


def test_unlinked_open_file_stays_usable(d):
    p = d / "f"
    data = pattern("ul", 2 * MiB)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.lexists(p)
        assert os.listdir(d) == []
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, len(data), 0) == data
        os.pwrite(fd, b"more", len(data))
        os.ftruncate(fd, len(data) + 100)
        assert os.fstat(fd).st_size == len(data) + 100
        assert os.pread(fd, 10, len(data)) == b"more" + b"\0" * 6
        # a new file of the same name is a different file
        write_file(p, b"new")
        assert read_file(p) == b"new"
        assert os.pread(fd, 4, len(data)) == b"more"
        os.fsync(fd)
    finally:
        os.close(fd)
    assert read_file(p) == b"new"


def test_truncate_down_and_up(d):
    p = d / "f"
    data = pattern("tr", 6 * MiB)
    write_file(p, data)
    os.truncate(p, 5 * MiB + 3)
    assert os.stat(p).st_size == 5 * MiB + 3
    os.truncate(p, 100)
    assert read_file(p) == data[:100]
    os.truncate(p, 4 * MiB + 50)  # up: the new part reads as zeros
    got = read_file(p)
    assert len(got) == 4 * MiB + 50
    assert got[:100] == data[:100]
    assert got[100:] == bytes(4 * MiB - 50)
    os.truncate(p, 0)
    assert read_file(p) == b""


def test_truncate_via_fd_and_errors(d):
    p = d / "f"
    write_file(p, b"0123456789")
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 4)
        assert os.pread(fd, 100, 0) == b"0123"
        os.ftruncate(fd, 8)
        assert os.pread(fd, 100, 0) == b"0123\0\0\0\0"
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    try:
        expect_errno((errno.EINVAL, errno.EBADF), os.ftruncate, fd, 1)
    finally:
        os.close(fd)
    os.mkdir(d / "dir")
    expect_errno(errno.EISDIR, os.truncate, d / "dir", 0)
    expect_errno(errno.EINVAL, os.truncate, p, -1)
    expect_errno(errno.ENOENT, os.truncate, d / "missing", 0)


def test_truncate_then_write_past_cut(d):
    """Stale bytes beyond a truncation must not come back when the file grows again."""
    p = d / "f"
    write_file(p, b"A" * 10000)
    with open(p, "r+b") as f:
        f.truncate(10)
        f.seek(5000)
        f.write(b"B")
    got = read_file(p)
    assert got == b"A" * 10 + bytes(4990) + b"B"


def test_name_length_limits(d):
    ok = "n" * 255
    write_file(d / ok, b"x")
    assert ok in os.listdir(d)
    os.mkdir(d / ("m" * 255))
    expect_errno(errno.ENAMETOOLONG, os.open, d / ("n" * 256), os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, d / ("m" * 256))
    expect_errno(errno.ENAMETOOLONG, os.stat, d / ("n" * 256))
    expect_errno(errno.ENAMETOOLONG, os.symlink, "t", d / ("s" * 256))
    # 255 bytes of UTF-8 (multi-byte characters) is fine too
    utf = "é" * 127 + "x"
    assert len(utf.encode()) == 255
    write_file(d / utf, b"u")
    assert read_file(d / utf) == b"u"


def test_deep_path_near_path_max(d):
    """A relative path of ~4090 bytes resolves; 4096 bytes is ENAMETOOLONG."""
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        comp = "p" * 200
        parts: list[str] = []
        while 4090 - len("/".join(parts)) - 1 > 255:
            parts.append(comp)
            os.mkdir("/".join(parts), dir_fd=dfd)
        last = "q" * (4090 - len("/".join(parts)) - 1)
        rel = "/".join(parts + [last])
        assert 4085 <= len(rel) <= 4095
        fd = os.open(rel, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=dfd)
        os.write(fd, b"deep")
        os.close(fd)
        fd = os.open(rel, os.O_RDONLY, dir_fd=dfd)
        assert os.read(fd, 10) == b"deep"
        os.close(fd)
        assert os.stat(rel, dir_fd=dfd).st_size == 4
        too_long = rel + "x" * (4096 - len(rel))
        expect_errno(errno.ENAMETOOLONG, os.stat, too_long, dir_fd=dfd)
    finally:
        os.close(dfd)


def _drop_kernel_caches() -> None:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")  # dentries and inodes: the kernel sends FORGET for them
    except OSError as e:
        pytest.skip(f"cannot drop kernel caches: {e}")


def test_lookup_after_forget(d):
    """After the kernel forgets inodes, lookups find the same inodes and data again,
    and an inode still held open (here: unlinked) stays usable."""
    os.makedirs(d / "x" / "y")
    for i in range(50):
        write_file(d / "x" / "y" / f"f{i}", f"{i}".encode())
    os.link(d / "x" / "y" / "f0", d / "hard")
    inos = {i: os.stat(d / "x" / "y" / f"f{i}").st_ino for i in range(50)}
    fd = os.open(d / "x" / "y" / "f1", os.O_RDWR)
    try:
        os.unlink(d / "x" / "y" / "f1")
        _drop_kernel_caches()
        os.pwrite(fd, b"still", 0)
        assert os.pread(fd, 5, 0) == b"still"
    finally:
        os.close(fd)
    _drop_kernel_caches()
    for i in range(50):
        if i == 1:
            assert not os.path.lexists(d / "x" / "y" / "f1")
            continue
        assert os.stat(d / "x" / "y" / f"f{i}").st_ino == inos[i]
        assert read_file(d / "x" / "y" / f"f{i}") == f"{i}".encode()
    assert os.stat(d / "hard").st_ino == inos[0]
    assert os.stat(d / "hard").st_nlink == 2


def _append_records(path, worker, count):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(count):
            os.write(fd, f"<{worker:02d}:{i:05d}:{'x' * (worker * 37 % 200)}>\n".encode())
    finally:
        os.close(fd)


def test_concurrent_o_append_writers(d):
    """Appends from several processes never overwrite each other."""
    p = d / "log"
    write_file(p, b"")
    workers, count = 4, 300
    run_parallel(_append_records, [(p, w, count) for w in range(workers)])
    lines = read_file(p).splitlines()
    assert len(lines) == workers * count
    for w in range(workers):
        mine = [ln for ln in lines if ln.startswith(f"<{w:02d}:".encode())]
        assert mine == [f"<{w:02d}:{i:05d}:{'x' * (w * 37 % 200)}>".encode()
                        for i in range(count)]


def _write_region(path, worker, region):
    fd = os.open(path, os.O_WRONLY)
    try:
        for off in range(0, region, 64 * 1024):
            os.pwrite(fd, pattern((worker, off), 64 * 1024), worker * region + off)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_concurrent_writers_distinct_regions(d):
    """Processes writing disjoint ranges of one file (a sharded checkpoint) all land."""
    p = d / "shared"
    write_file(p, b"")
    workers, region = 4, 3 * MiB  # regions straddle 4 MiB block boundaries
    run_parallel(_write_region, [(p, w, region) for w in range(workers)])
    data = read_file(p)
    assert len(data) == workers * region
    for w in range(workers):
        for off in range(0, region, 64 * 1024):
            start = w * region + off
            assert data[start:start + 64 * 1024] == pattern((w, off), 64 * 1024), (w, off)


def test_many_small_files(d):
    for i in range(300):
        write_file(d / f"f{i}", f"content {i}".encode())
    assert len(os.listdir(d)) == 300
    for i in range(0, 300, 7):
        assert read_file(d / f"f{i}") == f"content {i}".encode()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 128 * 1024 + 1, 4 * MiB, 4 * MiB + 1])
def test_sizes_round_trip(d, size):
    data = pattern(size, size)
    write_file(d / "f", data)
    assert os.stat(d / "f").st_size == size
    assert read_file(d / "f") == data
