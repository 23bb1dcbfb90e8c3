"""getattr/setattr: chmod, chown, utimens, timestamps, statfs."""

import errno
import os
import stat
import time

import pytest

from helpers import expect_errno, pattern, read_file, tick, utimensat, write_file

SEC = 10**9
OLD = 1_000_000_000 * SEC  # 2001-09-09
NOW_SLACK = 30 * SEC


def _near_now(ns: int) -> bool:
    return abs(ns - time.time_ns()) < NOW_SLACK


# -- chmod / chown -----------------------------------------------------------

def test_chmod(d):
    write_file(d / "f", b"")
    for mode in (0o000, 0o777, 0o4755, 0o2711, 0o1777, 0o640):
        os.chmod(d / "f", mode)
        st = os.stat(d / "f")
        assert stat.S_IMODE(st.st_mode) == mode
        assert stat.S_ISREG(st.st_mode)
    os.mkdir(d / "dir")
    os.chmod(d / "dir", 0o3775)
    assert stat.S_IMODE(os.stat(d / "dir").st_mode) == 0o3775
    expect_errno(errno.ENOENT, os.chmod, d / "missing", 0o644)


def test_fchmod_and_fstat_agree(d):
    fd = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.fchmod(fd, 0o604)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o604
        assert os.fstat(fd).st_ino == os.stat(d / "f").st_ino
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(d / "f").st_mode) == 0o604


def test_chmod_through_symlink_changes_target(d):
    write_file(d / "t", b"")
    os.symlink("t", d / "s")
    os.chmod(d / "s", 0o600)
    assert stat.S_IMODE(os.stat(d / "t").st_mode) == 0o600
    assert stat.S_ISLNK(os.lstat(d / "s").st_mode)


def test_chown(d):
    write_file(d / "f", b"")
    os.chown(d / "f", 4001, 4002)
    st = os.stat(d / "f")
    assert (st.st_uid, st.st_gid) == (4001, 4002)
    os.chown(d / "f", -1, 4003)
    st = os.stat(d / "f")
    assert (st.st_uid, st.st_gid) == (4001, 4003)
    os.chown(d / "f", 4004, -1)
    st = os.stat(d / "f")
    assert (st.st_uid, st.st_gid) == (4004, 4003)
    os.mkdir(d / "dir")
    os.chown(d / "dir", 4005, 4006)
    assert (os.stat(d / "dir").st_uid, os.stat(d / "dir").st_gid) == (4005, 4006)


def test_lchown_changes_link_only(d):
    write_file(d / "t", b"")
    os.symlink("t", d / "s")
    os.chown(d / "s", 4001, 4001, follow_symlinks=False)
    assert os.lstat(d / "s").st_uid == 4001
    assert os.stat(d / "t").st_uid == 0


def test_chown_by_root_clears_setid_bits(d):
    write_file(d / "f", b"")
    os.chmod(d / "f", 0o6755)
    os.chown(d / "f", 4001, 4001)
    mode = stat.S_IMODE(os.stat(d / "f").st_mode)
    assert mode & (stat.S_ISUID | stat.S_ISGID) == 0, oct(mode)
    assert mode & 0o777 == 0o755
    # setgid without group-exec (mandatory-locking marker) survives chown
    write_file(d / "g", b"")
    os.chmod(d / "g", 0o2644)
    os.chown(d / "g", 4001, 4001)
    assert stat.S_IMODE(os.stat(d / "g").st_mode) == 0o2644
    # directories keep their setgid bit
    os.mkdir(d / "dir")
    os.chmod(d / "dir", 0o2755)
    os.chown(d / "dir", 4001, 4001)
    assert stat.S_IMODE(os.stat(d / "dir").st_mode) == 0o2755


def test_chown_updates_ctime(d):
    write_file(d / "f", b"")
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    os.chown(d / "f", 4001, -1)
    assert os.stat(d / "f").st_ctime_ns > c0


# -- utimens -------------------------------------------------------------------

def test_utime_explicit_ns_round_trip(d):
    write_file(d / "f", b"")
    a, m = 1_234_567_890_123_456_789, 1_300_000_000_987_654_321
    os.utime(d / "f", ns=(a, m))
    st = os.stat(d / "f")
    assert (st.st_atime_ns, st.st_mtime_ns) == (a, m)


@pytest.mark.parametrize("when", [
    2**31 * SEC,                      # 2038-01-19T03:14:08, the 32-bit rollover
    2**31 * SEC + 1,
    4_102_444_800 * SEC + 999_999_999,  # 2100-01-01
    10_000_000_000 * SEC + 5,          # 2286
])
def test_times_beyond_2038(d, when):
    write_file(d / "f", b"")
    os.utime(d / "f", ns=(when, when))
    st = os.stat(d / "f")
    assert st.st_mtime_ns == when and st.st_atime_ns == when


def test_utime_now(d):
    write_file(d / "f", b"")
    os.utime(d / "f", ns=(OLD, OLD))
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    os.utime(d / "f")  # both UTIME_NOW
    st = os.stat(d / "f")
    assert _near_now(st.st_atime_ns) and _near_now(st.st_mtime_ns)
    assert st.st_ctime_ns > c0


def test_utime_omit(d):
    write_file(d / "f", b"")
    os.utime(d / "f", ns=(OLD, OLD + 5))
    utimensat(d / "f", "omit", OLD + 77)
    st = os.stat(d / "f")
    assert (st.st_atime_ns, st.st_mtime_ns) == (OLD, OLD + 77)
    utimensat(d / "f", OLD + 99, "omit")
    st = os.stat(d / "f")
    assert (st.st_atime_ns, st.st_mtime_ns) == (OLD + 99, OLD + 77)
    utimensat(d / "f", "now", "omit")
    st = os.stat(d / "f")
    assert _near_now(st.st_atime_ns) and st.st_mtime_ns == OLD + 77
    utimensat(d / "f", "omit", "now")
    st = os.stat(d / "f")
    assert _near_now(st.st_mtime_ns)


def test_utime_symlink_nofollow(d):
    write_file(d / "t", b"")
    os.utime(d / "t", ns=(OLD, OLD))
    os.symlink("t", d / "s")
    os.utime(d / "s", ns=(OLD + 1, OLD + 2), follow_symlinks=False)
    assert os.lstat(d / "s").st_mtime_ns == OLD + 2
    assert os.stat(d / "t").st_mtime_ns == OLD
    os.utime(d / "s", ns=(OLD + 3, OLD + 4))  # follows
    assert os.stat(d / "t").st_mtime_ns == OLD + 4
    assert os.lstat(d / "s").st_mtime_ns == OLD + 2


def test_utime_directory(d):
    os.mkdir(d / "dir")
    os.utime(d / "dir", ns=(OLD + 1, OLD + 2))
    st = os.stat(d / "dir")
    assert (st.st_atime_ns, st.st_mtime_ns) == (OLD + 1, OLD + 2)


# -- timestamps maintained by the filesystem -------------------------------------

def test_new_file_times(d):
    before = time.time_ns()
    write_file(d / "f", b"")
    st = os.stat(d / "f")
    for t in (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns):
        assert before - SEC < t < time.time_ns() + SEC


def test_write_updates_mtime_ctime(d):
    write_file(d / "f", b"abc")
    os.utime(d / "f", ns=(OLD, OLD))
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    fd = os.open(d / "f", os.O_WRONLY)
    os.write(fd, b"x")
    os.close(fd)
    st = os.stat(d / "f")
    assert _near_now(st.st_mtime_ns), st.st_mtime_ns
    assert st.st_ctime_ns > c0
    assert st.st_atime_ns == OLD


def test_mtime_visible_while_open(d):
    fd = os.open(d / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.utime(d / "f", ns=(OLD, OLD))
        os.write(fd, b"data")
        assert os.fstat(fd).st_mtime_ns > OLD
        assert os.stat(d / "f").st_mtime_ns > OLD
        assert os.stat(d / "f").st_size == 4
    finally:
        os.close(fd)


def test_truncate_updates_mtime_ctime(d):
    write_file(d / "f", b"abcdef")
    os.utime(d / "f", ns=(OLD, OLD))
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    os.truncate(d / "f", 2)
    st = os.stat(d / "f")
    assert _near_now(st.st_mtime_ns) and st.st_ctime_ns > c0


def test_chmod_updates_ctime_not_mtime(d):
    write_file(d / "f", b"")
    os.utime(d / "f", ns=(OLD, OLD))
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    os.chmod(d / "f", 0o600)
    st = os.stat(d / "f")
    assert st.st_ctime_ns > c0
    assert st.st_mtime_ns == OLD and st.st_atime_ns == OLD


def test_read_updates_atime_relatime(d):
    """relatime: a read updates atime when atime is not newer than mtime."""
    write_file(d / "f", b"content")
    os.utime(d / "f", ns=(OLD, OLD + SEC))
    assert read_file(d / "f") == b"content"
    assert os.stat(d / "f").st_atime_ns > OLD + SEC


def test_directory_times_follow_entries(d):
    os.mkdir(d / "dir")
    steps = [
        lambda: write_file(d / "dir" / "f", b""),
        lambda: os.mkdir(d / "dir" / "sub"),
        lambda: os.symlink("x", d / "dir" / "s"),
        lambda: os.link(d / "dir" / "f", d / "dir" / "h"),
        lambda: os.unlink(d / "dir" / "h"),
        lambda: os.rmdir(d / "dir" / "sub"),
        lambda: os.rename(d / "dir" / "f", d / "dir" / "g"),
    ]
    for step in steps:
        os.utime(d / "dir", ns=(OLD, OLD))
        c0 = os.stat(d / "dir").st_ctime_ns
        tick()
        step()
        st = os.stat(d / "dir")
        assert _near_now(st.st_mtime_ns), step
        assert st.st_ctime_ns > c0, step


def test_stat_fields_sane(d):
    write_file(d / "f", b"x" * 5000)
    st = os.stat(d / "f")
    assert st.st_blksize > 0
    assert st.st_uid == os.getuid() and st.st_gid == os.getgid()
    assert st.st_dev == os.stat(d).st_dev
    assert st.st_ino != os.stat(d).st_ino


# -- statfs ----------------------------------------------------------------------

def test_statfs_sane(d):
    sv = os.statvfs(d)
    assert sv.f_bsize > 0 and sv.f_frsize > 0
    assert sv.f_blocks > 0
    assert 0 <= sv.f_bavail <= sv.f_bfree <= sv.f_blocks
    assert sv.f_files > 0 and 0 <= sv.f_ffree <= sv.f_files
    assert sv.f_namemax == 255
    assert sv.f_blocks * sv.f_frsize >= 64 * 1024 * 1024


def test_statfs_tracks_usage(d):
    """Writing 32 MiB shows up as used space (retried: other writers share a local disk)."""
    size = 32 * 1024 * 1024

    def used() -> int:
        sv = os.statvfs(d)
        return (sv.f_blocks - sv.f_bfree) * sv.f_frsize

    deltas = []
    for attempt in range(3):
        before = used()
        write_file(d / f"f{attempt}", pattern(attempt, size), fsync=True)
        deltas.append(used() - before)
        if deltas[-1] >= size // 2:
            return
    pytest.fail(f"used space grew by {deltas} bytes after writing {size} bytes")
