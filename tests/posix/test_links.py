"""Hard links, symlinks and readlink."""

import errno
import os
import stat

from helpers import expect_errno, read_file, tick, write_file


def test_hard_link_shares_inode_and_data(d):
    write_file(d / "a", b"one")
    os.link(d / "a", d / "b")
    sa, sb = os.stat(d / "a"), os.stat(d / "b")
    assert sa.st_ino == sb.st_ino
    assert sa.st_nlink == sb.st_nlink == 2
    with open(d / "b", "ab") as f:
        f.write(b"two")
    assert read_file(d / "a") == b"onetwo"
    os.chmod(d / "a", 0o600)
    assert stat.S_IMODE(os.stat(d / "b").st_mode) == 0o600


def test_hard_link_counts(d):
    write_file(d / "a", b"x")
    os.mkdir(d / "sub")
    for i in range(5):
        os.link(d / "a", d / "sub" / f"l{i}")
    assert os.stat(d / "a").st_nlink == 6
    os.unlink(d / "a")
    assert os.stat(d / "sub" / "l0").st_nlink == 5
    for i in range(4):
        os.unlink(d / "sub" / f"l{i}")
    assert os.stat(d / "sub" / "l4").st_nlink == 1
    assert read_file(d / "sub" / "l4") == b"x"


def test_hard_link_of_open_file_then_unlink(d):
    write_file(d / "a", b"x")
    fd = os.open(d / "a", os.O_RDONLY)
    try:
        os.link(d / "a", d / "b")
        os.unlink(d / "a")
        assert os.fstat(fd).st_nlink == 1
        os.unlink(d / "b")
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, 1, 0) == b"x"
    finally:
        os.close(fd)


def test_link_errors(d):
    write_file(d / "a", b"")
    write_file(d / "b", b"")
    os.mkdir(d / "dir")
    expect_errno(errno.EEXIST, os.link, d / "a", d / "b")
    expect_errno(errno.EPERM, os.link, d / "dir", d / "dirlink")
    expect_errno(errno.ENOENT, os.link, d / "missing", d / "c")
    expect_errno(errno.ENOENT, os.link, d / "a", d / "nodir" / "c")
    assert os.stat(d / "a").st_nlink == 1


def test_link_updates_ctime(d):
    write_file(d / "a", b"")
    before = os.stat(d / "a").st_ctime_ns
    tick()
    os.link(d / "a", d / "b")
    assert os.stat(d / "a").st_ctime_ns > before


def test_symlink_readlink(d):
    write_file(d / "target", b"T")
    os.symlink("target", d / "rel")
    os.symlink(str(d / "target"), d / "abs")
    assert os.readlink(d / "rel") == "target"
    assert os.readlink(d / "abs") == str(d / "target")
    assert read_file(d / "rel") == b"T"
    assert read_file(d / "abs") == b"T"
    lst = os.lstat(d / "rel")
    assert stat.S_ISLNK(lst.st_mode)
    assert lst.st_size == len("target")
    assert stat.S_ISREG(os.stat(d / "rel").st_mode)
    assert os.readlink(os.fsencode(d / "rel")) == b"target"


def test_symlink_odd_targets(d):
    long_target = "x/" * 1000 + "end"
    weird = "spaces and\nnewline \u00e9\u4e2d"
    os.symlink(long_target, d / "long")
    os.symlink(weird, d / "weird")
    os.symlink("nowhere/target", d / "dangling")
    assert os.readlink(d / "long") == long_target
    assert os.readlink(d / "weird") == weird
    assert os.lstat(d / "weird").st_size == len(weird.encode())
    expect_errno(errno.ENOENT, os.stat, d / "dangling")
    assert os.path.lexists(d / "dangling")


def test_symlink_through_directories(d):
    os.makedirs(d / "real" / "inner")
    write_file(d / "real" / "inner" / "f", b"deep")
    os.symlink("real", d / "link")
    os.symlink("../real/inner", d / "real" / "up")
    assert read_file(d / "link" / "inner" / "f") == b"deep"
    assert read_file(d / "real" / "up" / "f") == b"deep"
    assert sorted(os.listdir(d / "link")) == ["inner", "up"]


def test_symlink_errors(d):
    write_file(d / "f", b"")
    os.symlink("f", d / "s")
    expect_errno(errno.EEXIST, os.symlink, "x", d / "f")
    expect_errno(errno.EEXIST, os.symlink, "x", d / "s")
    expect_errno(errno.EINVAL, os.readlink, d / "f")
    expect_errno(errno.ENOENT, os.readlink, d / "missing")
    os.symlink("loop2", d / "loop1")
    os.symlink("loop1", d / "loop2")
    expect_errno(errno.ELOOP, os.stat, d / "loop1")
    expect_errno(errno.ELOOP, os.open, d / "s", os.O_RDONLY | os.O_NOFOLLOW)
    expect_errno(errno.ENOENT, os.symlink, "", d / "empty")


def test_unlink_symlink_keeps_target(d):
    write_file(d / "t", b"keep")
    os.symlink("t", d / "s")
    os.unlink(d / "s")
    assert read_file(d / "t") == b"keep"
    assert os.listdir(d) == ["t"]


def test_hard_link_to_symlink(d):
    os.symlink("target", d / "s")
    os.link(d / "s", d / "s2", follow_symlinks=False)
    assert os.readlink(d / "s2") == "target"
    assert os.lstat(d / "s").st_nlink == 2
