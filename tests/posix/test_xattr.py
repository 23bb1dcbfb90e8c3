"""getxattr/setxattr/listxattr/removexattr."""

import errno
import os

from helpers import expect_errno, tick, write_file

ENODATA = errno.ENODATA


def test_set_get_list_remove(d):
    p = d / "f"
    write_file(p, b"")
    assert [n for n in os.listxattr(p) if n.startswith("user.")] == []
    os.setxattr(p, "user.a", b"1")
    os.setxattr(p, "user.b", b"\0binary\xff" * 10)
    assert os.getxattr(p, "user.a") == b"1"
    assert os.getxattr(p, "user.b") == b"\0binary\xff" * 10
    assert sorted(n for n in os.listxattr(p) if n.startswith("user.")) == ["user.a", "user.b"]
    os.removexattr(p, "user.a")
    expect_errno(ENODATA, os.getxattr, p, "user.a")
    assert [n for n in os.listxattr(p) if n.startswith("user.")] == ["user.b"]


def test_create_replace_flags(d):
    p = d / "f"
    write_file(p, b"")
    expect_errno(ENODATA, os.setxattr, p, "user.x", b"v", os.XATTR_REPLACE)
    os.setxattr(p, "user.x", b"v1", os.XATTR_CREATE)
    expect_errno(errno.EEXIST, os.setxattr, p, "user.x", b"v2", os.XATTR_CREATE)
    assert os.getxattr(p, "user.x") == b"v1"
    os.setxattr(p, "user.x", b"v3", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.x") == b"v3"
    os.setxattr(p, "user.x", b"v4")
    assert os.getxattr(p, "user.x") == b"v4"


def test_missing_attr_errors(d):
    p = d / "f"
    write_file(p, b"")
    expect_errno(ENODATA, os.getxattr, p, "user.missing")
    expect_errno(ENODATA, os.removexattr, p, "user.missing")
    expect_errno(errno.ENOENT, os.getxattr, d / "nofile", "user.a")
    expect_errno(errno.ENOENT, os.setxattr, d / "nofile", "user.a", b"")


def test_empty_and_large_values(d):
    p = d / "f"
    write_file(p, b"")
    os.setxattr(p, "user.empty", b"")
    assert os.getxattr(p, "user.empty") == b""
    assert "user.empty" in os.listxattr(p)
    big = bytes(range(256)) * 8  # 2 KiB, fits every Linux filesystem
    os.setxattr(p, "user.big", big)
    assert os.getxattr(p, "user.big") == big
    os.setxattr(p, "user.big", b"small")  # shrink
    assert os.getxattr(p, "user.big") == b"small"


def test_xattr_name_limits(d):
    p = d / "f"
    write_file(p, b"")
    name = "user." + "n" * 250  # 255 bytes: the Linux XATTR_NAME_MAX
    os.setxattr(p, name, b"v")
    assert os.getxattr(p, name) == b"v"
    expect_errno(errno.ERANGE, os.setxattr, p, name + "x", b"v")
    expect_errno((errno.EOPNOTSUPP, errno.EINVAL), os.setxattr, p, "nonamespace", b"v")


def test_xattr_on_directory_and_via_fd(d):
    os.mkdir(d / "dir")
    os.setxattr(d / "dir", "user.d", b"dirval")
    assert os.getxattr(d / "dir", "user.d") == b"dirval"
    fd = os.open(d / "f", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.setxattr(fd, "user.fd", b"fdval")
        assert os.getxattr(fd, "user.fd") == b"fdval"
        assert os.getxattr(d / "f", "user.fd") == b"fdval"
    finally:
        os.close(fd)


def test_xattr_follows_symlink_and_link_refuses_user(d):
    write_file(d / "t", b"")
    os.symlink("t", d / "s")
    os.setxattr(d / "s", "user.via", b"link")
    assert os.getxattr(d / "t", "user.via") == b"link"
    # user.* attributes are not allowed on symlinks themselves
    expect_errno(errno.EPERM, os.setxattr, d / "s", "user.x", b"v", follow_symlinks=False)


def test_xattrs_shared_by_hard_links_and_survive_rename(d):
    write_file(d / "a", b"")
    os.setxattr(d / "a", "user.k", b"v")
    os.link(d / "a", d / "b")
    assert os.getxattr(d / "b", "user.k") == b"v"
    os.rename(d / "a", d / "c")
    assert os.getxattr(d / "c", "user.k") == b"v"


def test_many_xattrs(d):
    p = d / "f"
    write_file(p, b"")
    names = [f"user.k{i:02d}" for i in range(30)]
    for n in names:
        os.setxattr(p, n, n.encode())
    assert sorted(n for n in os.listxattr(p) if n.startswith("user.")) == names
    for n in names[::2]:
        os.removexattr(p, n)
    assert sorted(n for n in os.listxattr(p) if n.startswith("user.")) == names[1::2]
    for n in names[1::2]:
        assert os.getxattr(p, n) == n.encode()


def test_setxattr_updates_ctime(d):
    write_file(d / "f", b"")
    c0 = os.stat(d / "f").st_ctime_ns
    tick()
    os.setxattr(d / "f", "user.t", b"1")
    assert os.stat(d / "f").st_ctime_ns > c0


def test_xattrs_gone_with_file(d):
    write_file(d / "f", b"")
    os.setxattr(d / "f", "user.old", b"1")
    os.unlink(d / "f")
    write_file(d / "f", b"")
    expect_errno(ENODATA, os.getxattr, d / "f", "user.old")
