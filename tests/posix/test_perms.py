"""Permission checks (default_permissions, allow_other), ownership of new inodes,
setgid inheritance and clearing of set-id bits. Runs code as other users by
forking and dropping privileges."""

import errno
import os
import stat

import pytest

from helpers import expect_errno, read_file, run_as, write_file

ALICE = dict(uid=4001, gid=4001)
BOB = dict(uid=4002, gid=4002)
SHARED_GID = 4500


@pytest.fixture
def pd(d):
    """The test directory, open to every user (like /tmp, without the sticky bit)."""
    os.chmod(d, 0o777)
    return d


def _write(path, data, flags=os.O_WRONLY):
    fd = os.open(path, flags, 0o666)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def _creat(path, mode=0o644):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode))
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


# -- who owns new inodes ---------------------------------------------------------

def test_new_inodes_take_callers_ids(pd):
    assert run_as(_creat, pd / "f", **ALICE) == (4001, 4001, 0o644)
    run_as(os.mkdir, pd / "dir", **ALICE)
    run_as(os.symlink, "f", pd / "sym", **ALICE)
    run_as(os.mkfifo, pd / "fifo", **ALICE)
    for name in ("dir", "sym", "fifo"):
        st = os.lstat(pd / name)
        assert (st.st_uid, st.st_gid) == (4001, 4001), name


def test_new_inode_mode_respects_umask(pd):
    assert run_as(_creat, pd / "f", 0o666, umask=0o027, **ALICE)[2] == 0o640
    run_as(os.mkdir, pd / "dir", 0o777, umask=0o002, **ALICE)
    assert stat.S_IMODE(os.stat(pd / "dir").st_mode) == 0o775


# -- access checks as a non-owner ------------------------------------------------

def test_read_private_file_of_other_user(pd):
    write_file(pd / "secret", b"s")
    os.chmod(pd / "secret", 0o600)
    expect_errno(errno.EACCES, run_as, read_file, pd / "secret", **ALICE)
    os.chmod(pd / "secret", 0o604)
    assert run_as(read_file, pd / "secret", **ALICE) == b"s"


def test_write_readonly_file_of_other_user(pd):
    write_file(pd / "ro", b"r")
    os.chmod(pd / "ro", 0o644)
    expect_errno(errno.EACCES, run_as, _write, pd / "ro", b"x", **ALICE)
    expect_errno(errno.EACCES, run_as, os.truncate, pd / "ro", 0, **ALICE)
    assert read_file(pd / "ro") == b"r"


def test_group_permission_bits(pd):
    write_file(pd / "g", b"g")
    os.chown(pd / "g", 0, SHARED_GID)
    os.chmod(pd / "g", 0o640)
    assert run_as(read_file, pd / "g", groups=(SHARED_GID,), **ALICE) == b"g"
    expect_errno(errno.EACCES, run_as, read_file, pd / "g", **BOB)
    # owner bits win over group bits even when they deny
    os.chown(pd / "g", 4001, SHARED_GID)
    os.chmod(pd / "g", 0o040)
    expect_errno(errno.EACCES, run_as, read_file, pd / "g", groups=(SHARED_GID,), **ALICE)


def test_create_in_readonly_dir(d):
    os.chmod(d, 0o755)
    expect_errno(errno.EACCES, run_as, _creat, d / "f", **ALICE)
    expect_errno(errno.EACCES, run_as, os.mkdir, d / "dir", **ALICE)
    write_file(d / "victim", b"v")
    expect_errno(errno.EACCES, run_as, os.unlink, d / "victim", **ALICE)
    expect_errno(errno.EACCES, run_as, os.rename, d / "victim", d / "v2", **ALICE)
    assert os.listdir(d) == ["victim"]


def test_search_permission_on_directory(pd):
    os.mkdir(pd / "locked", 0o700)
    write_file(pd / "locked" / "f", b"x")
    os.chmod(pd / "locked" / "f", 0o644)
    expect_errno(errno.EACCES, run_as, os.stat, pd / "locked" / "f", **ALICE)
    expect_errno(errno.EACCES, run_as, os.listdir, pd / "locked", **ALICE)
    os.chmod(pd / "locked", 0o711)  # search but not read
    assert run_as(read_file, pd / "locked" / "f", **ALICE) == b"x"
    expect_errno(errno.EACCES, run_as, os.listdir, pd / "locked", **ALICE)


def test_sticky_directory(pd):
    os.mkdir(pd / "tmp", 0o1777)
    os.chmod(pd / "tmp", 0o1777)
    run_as(_creat, pd / "tmp" / "alices", **ALICE)
    expect_errno(errno.EPERM, run_as, os.unlink, pd / "tmp" / "alices", **BOB)
    expect_errno(errno.EPERM, run_as, os.rename, pd / "tmp" / "alices", pd / "tmp" / "x", **BOB)
    run_as(os.unlink, pd / "tmp" / "alices", **ALICE)
    assert os.listdir(pd / "tmp") == []


def test_owner_only_operations(pd):
    write_file(pd / "f", b"")
    os.chmod(pd / "f", 0o666)
    expect_errno(errno.EPERM, run_as, os.chmod, pd / "f", 0o777, **ALICE)
    expect_errno(errno.EPERM, run_as, os.chown, pd / "f", 4001, 4001, **ALICE)
    # explicit times need ownership; "now" needs only write permission
    expect_errno(errno.EPERM, run_as, os.utime, pd / "f", (1, 1), **ALICE)
    run_as(os.utime, pd / "f", None, **ALICE)
    os.chmod(pd / "f", 0o644)
    expect_errno(errno.EACCES, run_as, os.utime, pd / "f", None, **ALICE)
    # user.* xattrs need write permission
    expect_errno(errno.EACCES, run_as, os.setxattr, pd / "f", "user.x", b"v", **BOB)


def test_owner_may_chown_to_own_group_only(pd):
    run_as(_creat, pd / "f", **ALICE)
    run_as(os.chown, pd / "f", -1, SHARED_GID, groups=(SHARED_GID,), **ALICE)
    assert os.stat(pd / "f").st_gid == SHARED_GID
    expect_errno(errno.EPERM, run_as, os.chown, pd / "f", -1, 4999, **ALICE)
    expect_errno(errno.EPERM, run_as, os.chown, pd / "f", 4002, -1, **ALICE)


def test_non_owner_chmod_setgid_of_foreign_group_is_dropped(pd):
    run_as(_creat, pd / "f", **ALICE)
    os.chown(pd / "f", 4001, SHARED_GID)
    # alice is not in SHARED_GID: chmod g+s silently drops S_ISGID
    run_as(os.chmod, pd / "f", 0o2755, **ALICE)
    assert stat.S_IMODE(os.stat(pd / "f").st_mode) == 0o755


# -- setgid directories ------------------------------------------------------------

def test_setgid_dir_inheritance(pd):
    os.mkdir(pd / "shared")
    os.chown(pd / "shared", 0, SHARED_GID)
    os.chmod(pd / "shared", 0o2777)
    uid, gid, _ = run_as(_creat, pd / "shared" / "f", **ALICE)
    assert (uid, gid) == (4001, SHARED_GID)
    run_as(os.mkdir, pd / "shared" / "sub", 0o777, umask=0, **ALICE)
    st = os.stat(pd / "shared" / "sub")
    assert (st.st_uid, st.st_gid) == (4001, SHARED_GID)
    assert st.st_mode & stat.S_ISGID, "subdirectory must inherit the setgid bit"
    # and the grandchild inherits again
    run_as(_creat, pd / "shared" / "sub" / "g", **BOB)
    assert os.stat(pd / "shared" / "sub" / "g").st_gid == SHARED_GID
    run_as(os.symlink, "f", pd / "shared" / "sym", **ALICE)
    assert os.lstat(pd / "shared" / "sym").st_gid == SHARED_GID


def test_setgid_dir_strips_sgid_of_new_file_for_non_member(pd):
    os.mkdir(pd / "shared")
    os.chown(pd / "shared", 0, SHARED_GID)
    os.chmod(pd / "shared", 0o2777)
    _, gid, mode = run_as(_creat, pd / "shared" / "f", 0o2755, **ALICE)
    assert gid == SHARED_GID
    assert not mode & stat.S_ISGID


def test_plain_dir_does_not_inherit(pd):
    os.mkdir(pd / "plain")
    os.chown(pd / "plain", 0, SHARED_GID)
    os.chmod(pd / "plain", 0o777)
    _, gid, _ = run_as(_creat, pd / "plain" / "f", **ALICE)
    assert gid == 4001
    run_as(os.mkdir, pd / "plain" / "sub", **ALICE)
    assert not os.stat(pd / "plain" / "sub").st_mode & stat.S_ISGID


# -- set-id bits cleared by writes of non-owners --------------------------------------

def _setid_file(path, data=b"0123456789"):
    write_file(path, data)
    os.chmod(path, 0o6777)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o6777


def test_non_owner_write_clears_setid(pd):
    _setid_file(pd / "f")
    assert run_as(_write, pd / "f", b"x", **ALICE) == 1
    mode = stat.S_IMODE(os.stat(pd / "f").st_mode)
    assert mode & (stat.S_ISUID | stat.S_ISGID) == 0, oct(mode)
    assert mode & 0o777 == 0o777
    assert read_file(pd / "f") == b"x123456789"


def test_non_owner_truncate_clears_setid(pd):
    _setid_file(pd / "f")
    run_as(os.truncate, pd / "f", 3, **ALICE)
    st = os.stat(pd / "f")
    assert st.st_size == 3
    assert stat.S_IMODE(st.st_mode) & (stat.S_ISUID | stat.S_ISGID) == 0, oct(st.st_mode)


def test_non_owner_open_trunc_clears_setid(pd):
    _setid_file(pd / "f")
    run_as(_write, pd / "f", b"y", os.O_WRONLY | os.O_TRUNC, **ALICE)
    st = os.stat(pd / "f")
    assert st.st_size == 1
    assert stat.S_IMODE(st.st_mode) & (stat.S_ISUID | stat.S_ISGID) == 0, oct(st.st_mode)


def test_root_write_keeps_setid(pd):
    _setid_file(pd / "f")
    _write(pd / "f", b"root")
    assert stat.S_IMODE(os.stat(pd / "f").st_mode) == 0o6777
