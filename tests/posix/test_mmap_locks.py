"""mmap reads and writes; flock and POSIX fcntl locks between processes."""

import errno
import fcntl
import mmap
import os
import struct

from helpers import expect_errno, pattern, read_file, run_as, write_file

MiB = 1024 * 1024


def test_mmap_read(d):
    data = pattern("mm", 5 * MiB + 100)
    write_file(d / "f", data)
    with open(d / "f", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert len(m) == len(data)
        assert m[:100] == data[:100]
        assert m[4 * MiB - 10:4 * MiB + 10] == data[4 * MiB - 10:4 * MiB + 10]
        assert m[-100:] == data[-100:]


def test_mmap_write_then_read(d):
    p = d / "f"
    data = bytearray(pattern("mw", 2 * MiB))
    write_file(p, bytes(data))
    with open(p, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[10:20] = b"0123456789"
        m[MiB:MiB + 4] = b"MMAP"
        m[-1:] = b"!"
        m.flush()
    data[10:20] = b"0123456789"
    data[MiB:MiB + 4] = b"MMAP"
    data[-1:] = b"!"
    assert read_file(p) == bytes(data)
    assert os.stat(p).st_size == len(data)


def test_mmap_write_visible_to_other_process(d):
    p = d / "f"
    write_file(p, bytes(8192))
    with open(p, "r+b") as f, mmap.mmap(f.fileno(), 8192) as m:
        m[100:105] = b"hello"
        m.flush()
        assert run_as(lambda: read_file(p)[100:105]) == b"hello"


def test_mmap_sees_write(d):
    p = d / "f"
    write_file(p, bytes(4096))
    with open(p, "r+b") as f, mmap.mmap(f.fileno(), 4096) as m:
        os.pwrite(f.fileno(), b"written", 7)
        assert m[7:14] == b"written"


def test_mmap_after_truncate_extend(d):
    p = d / "f"
    write_file(p, b"")
    with open(p, "r+b") as f:
        f.truncate(3 * 4096)
        with mmap.mmap(f.fileno(), 0) as m:
            m[2 * 4096:2 * 4096 + 3] = b"end"
            m.flush()
    got = read_file(p)
    assert len(got) == 3 * 4096
    assert got[2 * 4096:2 * 4096 + 3] == b"end"
    assert got[:2 * 4096] == bytes(2 * 4096)


# -- locks ---------------------------------------------------------------------------

def _try_flock(path, how):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return "locked"
    finally:
        os.close(fd)


def test_flock_exclusive_between_processes(d):
    p = d / "lock"
    write_file(p, b"")
    fd = os.open(p, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        expect_errno(errno.EWOULDBLOCK, run_as, _try_flock, p, fcntl.LOCK_EX)
        expect_errno(errno.EWOULDBLOCK, run_as, _try_flock, p, fcntl.LOCK_SH)
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert run_as(_try_flock, p, fcntl.LOCK_EX) == "locked"
    finally:
        os.close(fd)


def test_flock_shared_between_processes(d):
    p = d / "lock"
    write_file(p, b"")
    fd = os.open(p, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert run_as(_try_flock, p, fcntl.LOCK_SH) == "locked"
        expect_errno(errno.EWOULDBLOCK, run_as, _try_flock, p, fcntl.LOCK_EX)
    finally:
        os.close(fd)
    # closing the last fd releases the lock
    assert run_as(_try_flock, p, fcntl.LOCK_EX) == "locked"


FLOCK_FMT = "hhqqi"  # struct flock on x86-64: l_type, l_whence, l_start, l_len, l_pid


def _getlk(fd, ltype, start, length):
    req = struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0)
    res = fcntl.fcntl(fd, fcntl.F_GETLK, req)
    l_type, _, l_start, l_len, l_pid = struct.unpack(FLOCK_FMT, res)
    return l_type, l_start, l_len, l_pid


def _try_posix_lock(path, ltype, start, length):
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, ltype | fcntl.LOCK_NB, length, start)
        return "locked"
    finally:
        os.close(fd)


def _query_lock(path, start, length):
    fd = os.open(path, os.O_RDWR)
    try:
        return _getlk(fd, fcntl.F_WRLCK, start, length)
    finally:
        os.close(fd)


def test_fcntl_locks_between_processes(d):
    p = d / "lock"
    write_file(p, bytes(1000))
    fd = os.open(p, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)        # bytes [0, 100)
        fcntl.lockf(fd, fcntl.LOCK_SH, 100, 500)      # bytes [500, 600)
        expect_errno((errno.EAGAIN, errno.EACCES), run_as, _try_posix_lock, p,
                     fcntl.LOCK_EX, 50, 10)
        expect_errno((errno.EAGAIN, errno.EACCES), run_as, _try_posix_lock, p,
                     fcntl.LOCK_SH, 0, 1)
        assert run_as(_try_posix_lock, p, fcntl.LOCK_EX, 200, 100) == "locked"
        assert run_as(_try_posix_lock, p, fcntl.LOCK_SH, 550, 10) == "locked"
        expect_errno((errno.EAGAIN, errno.EACCES), run_as, _try_posix_lock, p,
                     fcntl.LOCK_EX, 550, 10)
        l_type, l_start, l_len, l_pid = run_as(_query_lock, p, 0, 10)
        assert (l_type, l_start, l_len, l_pid) == (fcntl.F_WRLCK, 0, 100, os.getpid())
        assert run_as(_query_lock, p, 300, 10)[0] == fcntl.F_UNLCK
        fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
        assert run_as(_try_posix_lock, p, fcntl.LOCK_EX, 50, 10) == "locked"
    finally:
        os.close(fd)
    assert run_as(_try_posix_lock, p, fcntl.LOCK_EX, 0, 0) == "locked"


def test_fcntl_lock_released_on_any_close(d):
    """POSIX quirk: closing any fd of the file drops the process's locks."""
    p = d / "lock"
    write_file(p, b"x")
    fd = os.open(p, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 0, 0)
        os.close(os.open(p, os.O_RDONLY))
        assert run_as(_try_posix_lock, p, fcntl.LOCK_EX, 0, 0) == "locked"
    finally:
        os.close(fd)
