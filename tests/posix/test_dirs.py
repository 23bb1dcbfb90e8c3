"""mkdir/rmdir and directory link counts."""

import errno
import os
import stat

from helpers import expect_errno, write_file


def test_mkdir_rmdir(d):
    os.mkdir(d / "sub", 0o750)
    st = os.stat(d / "sub")
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o750
    assert os.listdir(d / "sub") == []
    os.rmdir(d / "sub")
    assert not os.path.lexists(d / "sub")
    assert os.listdir(d) == []


def test_mkdir_errors(d):
    os.mkdir(d / "sub")
    write_file(d / "f", b"")
    os.symlink("sub", d / "link")
    expect_errno(errno.EEXIST, os.mkdir, d / "sub")
    expect_errno(errno.EEXIST, os.mkdir, d / "f")
    expect_errno(errno.EEXIST, os.mkdir, d / "link")
    expect_errno(errno.ENOENT, os.mkdir, d / "missing" / "x")
    expect_errno(errno.ENOTDIR, os.mkdir, d / "f" / "x")


def test_rmdir_errors(d):
    os.makedirs(d / "full" / "child")
    os.mkdir(d / "withfile")
    write_file(d / "withfile" / "f", b"")
    write_file(d / "f", b"")
    os.symlink("full", d / "link")
    expect_errno(errno.ENOTEMPTY, os.rmdir, d / "full")
    expect_errno(errno.ENOTEMPTY, os.rmdir, d / "withfile")
    expect_errno(errno.ENOTDIR, os.rmdir, d / "f")
    expect_errno(errno.ENOTDIR, os.rmdir, d / "link")
    expect_errno(errno.ENOENT, os.rmdir, d / "missing")
    expect_errno(errno.EINVAL, os.rmdir, f"{d}/full/.")
    assert sorted(os.listdir(d)) == ["f", "full", "link", "withfile"]
    os.rmdir(d / "full" / "child")
    os.rmdir(d / "full")


def test_rmdir_after_emptying(d):
    os.mkdir(d / "sub")
    for i in range(20):
        write_file(d / "sub" / f"f{i}", b"x")
    expect_errno(errno.ENOTEMPTY, os.rmdir, d / "sub")
    for i in range(20):
        os.unlink(d / "sub" / f"f{i}")
    os.rmdir(d / "sub")


def test_dir_nlink_counts_subdirs(d):
    assert os.stat(d).st_nlink == 2
    os.mkdir(d / "a")
    os.mkdir(d / "b")
    write_file(d / "f", b"")  # files do not count
    os.symlink("a", d / "s")
    assert os.stat(d).st_nlink == 4
    os.mkdir(d / "a" / "x")
    assert os.stat(d / "a").st_nlink == 3
    assert os.stat(d).st_nlink == 4
    os.rmdir(d / "b")
    assert os.stat(d).st_nlink == 3
    os.rename(d / "a" / "x", d / "x")  # moves a link from a to d
    assert os.stat(d / "a").st_nlink == 2
    assert os.stat(d).st_nlink == 4


def test_dot_and_dotdot_resolve(d):
    os.makedirs(d / "a" / "b")
    assert os.stat(d / "a" / "b" / "..").st_ino == os.stat(d / "a").st_ino
    assert os.stat(d / "a" / ".").st_ino == os.stat(d / "a").st_ino
    assert os.path.samefile(d / "a" / "b" / ".." / "..", d)


def test_rmdir_of_cwd(d):
    os.mkdir(d / "cwd")
    old = os.getcwd()
    os.chdir(d / "cwd")
    try:
        os.rmdir(d / "cwd")
        expect_errno(errno.ENOENT, os.open, "newfile", os.O_CREAT | os.O_WRONLY)
    finally:
        os.chdir(old)
