"""rename(2) and renameat2(2) with RENAME_NOREPLACE / RENAME_EXCHANGE."""

import errno
import os
import stat

from helpers import (RENAME_EXCHANGE, RENAME_NOREPLACE, expect_errno, read_file, renameat2,
                     write_file)


def test_rename_file(d):
    write_file(d / "a", b"A")
    ino = os.stat(d / "a").st_ino
    os.rename(d / "a", d / "b")
    assert os.listdir(d) == ["b"]
    assert read_file(d / "b") == b"A"
    assert os.stat(d / "b").st_ino == ino


def test_rename_across_dirs(d):
    os.mkdir(d / "x")
    os.mkdir(d / "y")
    write_file(d / "x" / "f", b"data")
    os.rename(d / "x" / "f", d / "y" / "g")
    assert os.listdir(d / "x") == []
    assert read_file(d / "y" / "g") == b"data"


def test_rename_replaces_file_atomically(d):
    write_file(d / "a", b"new")
    write_file(d / "b", b"old")
    fd = os.open(d / "b", os.O_RDONLY)
    try:
        os.rename(d / "a", d / "b")
        assert os.listdir(d) == ["b"]
        assert read_file(d / "b") == b"new"
        # the replaced file lives on for whoever has it open
        assert os.pread(fd, 10, 0) == b"old"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)


def test_rename_replaced_hardlinked_target_keeps_other_name(d):
    write_file(d / "a", b"new")
    write_file(d / "b", b"old")
    os.link(d / "b", d / "b2")
    os.rename(d / "a", d / "b")
    assert read_file(d / "b2") == b"old"
    assert os.stat(d / "b2").st_nlink == 1


def test_rename_dir(d):
    os.makedirs(d / "a" / "sub")
    write_file(d / "a" / "sub" / "f", b"x")
    os.rename(d / "a", d / "b")
    assert read_file(d / "b" / "sub" / "f") == b"x"
    assert not os.path.lexists(d / "a")
    # ".." of a moved directory follows it
    os.mkdir(d / "other")
    os.rename(d / "b" / "sub", d / "other" / "sub")
    assert os.stat(d / "other" / "sub" / "..").st_ino == os.stat(d / "other").st_ino
    assert os.stat(d / "other").st_nlink == 3
    assert os.stat(d / "b").st_nlink == 2


def test_rename_dir_over_empty_dir(d):
    os.mkdir(d / "a")
    write_file(d / "a" / "f", b"x")
    os.mkdir(d / "b")
    os.rename(d / "a", d / "b")
    assert os.listdir(d) == ["b"]
    assert os.listdir(d / "b") == ["f"]
    assert os.stat(d).st_nlink == 3


def test_rename_dir_over_nonempty_dir(d):
    os.mkdir(d / "a")
    os.mkdir(d / "b")
    write_file(d / "b" / "f", b"x")
    expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rename, d / "a", d / "b")
    assert sorted(os.listdir(d)) == ["a", "b"]
    assert os.listdir(d / "b") == ["f"]


def test_rename_type_mismatch(d):
    os.mkdir(d / "dir")
    write_file(d / "file", b"x")
    expect_errno(errno.EISDIR, os.rename, d / "file", d / "dir")
    expect_errno(errno.ENOTDIR, os.rename, d / "dir", d / "file")
    assert sorted(os.listdir(d)) == ["dir", "file"]


def test_rename_dir_into_itself(d):
    os.makedirs(d / "a" / "b" / "c")
    expect_errno(errno.EINVAL, os.rename, d / "a", d / "a" / "x")
    expect_errno(errno.EINVAL, os.rename, d / "a", d / "a" / "b" / "c" / "x")
    expect_errno(errno.EINVAL, renameat2, d / "a", d / "a" / "b" / "y", RENAME_NOREPLACE)
    assert os.listdir(d) == ["a"]
    assert os.listdir(d / "a" / "b" / "c") == []


def test_rename_errors(d):
    write_file(d / "f", b"")
    expect_errno(errno.ENOENT, os.rename, d / "missing", d / "x")
    expect_errno(errno.ENOENT, os.rename, d / "f", d / "nodir" / "x")
    expect_errno(errno.ENOTDIR, os.rename, d / "f", d / "f" / "x")
    os.mkdir(d / "dir")
    expect_errno((errno.EBUSY, errno.EINVAL), os.rename, f"{d}/dir/.", d / "y")
    expect_errno((errno.ENAMETOOLONG,), os.rename, d / "f", d / ("n" * 256))


def test_rename_to_self_and_same_inode(d):
    write_file(d / "a", b"x")
    os.rename(d / "a", d / "a")
    assert read_file(d / "a") == b"x"
    os.link(d / "a", d / "b")
    # both names of one inode: rename does nothing and succeeds
    os.rename(d / "a", d / "b")
    assert sorted(os.listdir(d)) == ["a", "b"]
    assert os.stat(d / "a").st_nlink == 2


def test_rename_symlink(d):
    os.symlink("target", d / "l")
    os.rename(d / "l", d / "m")
    assert os.readlink(d / "m") == "target"
    assert stat.S_ISLNK(os.lstat(d / "m").st_mode)


def test_noreplace(d):
    write_file(d / "a", b"A")
    write_file(d / "b", b"B")
    expect_errno(errno.EEXIST, renameat2, d / "a", d / "b", RENAME_NOREPLACE)
    assert read_file(d / "a") == b"A" and read_file(d / "b") == b"B"
    renameat2(d / "a", d / "c", RENAME_NOREPLACE)
    assert sorted(os.listdir(d)) == ["b", "c"]
    os.mkdir(d / "dir")
    expect_errno(errno.EEXIST, renameat2, d / "b", d / "dir", RENAME_NOREPLACE)


def test_exchange_files(d):
    write_file(d / "a", b"A")
    write_file(d / "b", b"BB")
    ia, ib = os.stat(d / "a").st_ino, os.stat(d / "b").st_ino
    renameat2(d / "a", d / "b", RENAME_EXCHANGE)
    assert read_file(d / "a") == b"BB"
    assert read_file(d / "b") == b"A"
    assert os.stat(d / "a").st_ino == ib and os.stat(d / "b").st_ino == ia


def test_exchange_file_and_dir_across_parents(d):
    os.makedirs(d / "p1" / "dir")
    write_file(d / "p1" / "dir" / "inner", b"i")
    os.mkdir(d / "p2")
    write_file(d / "p2" / "file", b"f")
    renameat2(d / "p1" / "dir", d / "p2" / "file", RENAME_EXCHANGE)
    assert read_file(d / "p1" / "dir") == b"f"
    assert read_file(d / "p2" / "file" / "inner") == b"i"
    # the directory moved parent: link counts follow
    assert os.stat(d / "p1").st_nlink == 2
    assert os.stat(d / "p2").st_nlink == 3
    assert os.stat(d / "p2" / "file" / "..").st_ino == os.stat(d / "p2").st_ino


def test_exchange_errors(d):
    write_file(d / "a", b"A")
    expect_errno(errno.ENOENT, renameat2, d / "a", d / "missing", RENAME_EXCHANGE)
    expect_errno(errno.ENOENT, renameat2, d / "missing", d / "a", RENAME_EXCHANGE)
    expect_errno(errno.EINVAL, renameat2, d / "a", d / "b", RENAME_EXCHANGE | RENAME_NOREPLACE)
    os.makedirs(d / "x" / "y")
    expect_errno(errno.EINVAL, renameat2, d / "x", d / "x" / "y", RENAME_EXCHANGE)
    assert read_file(d / "a") == b"A"


def test_rename_updates_parent_times(d):
    os.mkdir(d / "src")
    os.mkdir(d / "dst")
    write_file(d / "src" / "f", b"")
    old = 1_000_000_000 * 10**9
    for p in ("src", "dst"):
        os.utime(d / p, ns=(old, old))
    os.rename(d / "src" / "f", d / "dst" / "f")
    assert os.stat(d / "src").st_mtime_ns > old
    assert os.stat(d / "dst").st_mtime_ns > old
