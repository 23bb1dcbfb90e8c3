"""mknod of FIFOs, sockets and device nodes (kept as plain metadata)."""

import errno
import os
import socket
import stat

from helpers import expect_errno


def test_mkfifo_and_use(d):
    p = d / "fifo"
    os.mkfifo(p, 0o640)
    st = os.lstat(p)
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o640
    r = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(w, b"through the pipe")
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
        os.close(w)
    assert os.stat(p).st_size == 0


def test_mknod_fifo(d):
    os.mknod(d / "f", stat.S_IFIFO | 0o600)
    assert stat.S_ISFIFO(os.lstat(d / "f").st_mode)


def test_mknod_char_and_block_devices(d):
    os.mknod(d / "chr", stat.S_IFCHR | 0o640, os.makedev(1, 3))
    os.mknod(d / "blk", stat.S_IFBLK | 0o604, os.makedev(259, 65537))
    c, b = os.lstat(d / "chr"), os.lstat(d / "blk")
    assert stat.S_ISCHR(c.st_mode) and stat.S_IMODE(c.st_mode) == 0o640
    assert (os.major(c.st_rdev), os.minor(c.st_rdev)) == (1, 3)
    assert stat.S_ISBLK(b.st_mode) and stat.S_IMODE(b.st_mode) == 0o604
    assert (os.major(b.st_rdev), os.minor(b.st_rdev)) == (259, 65537)
    # they survive rename and hard links like any inode
    os.rename(d / "chr", d / "chr2")
    os.link(d / "chr2", d / "chr3")
    assert os.lstat(d / "chr3").st_rdev == c.st_rdev
    assert os.lstat(d / "chr3").st_nlink == 2


def test_mknod_socket_and_unix_socket_bind(d):
    os.mknod(d / "s", stat.S_IFSOCK | 0o600)
    assert stat.S_ISSOCK(os.lstat(d / "s").st_mode)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(str(d / "sock"))
        srv.listen(1)
        assert stat.S_ISSOCK(os.lstat(d / "sock").st_mode)
        cli.connect(str(d / "sock"))
        conn, _ = srv.accept()
        with conn:
            cli.sendall(b"ping")
            assert conn.recv(4) == b"ping"
    finally:
        srv.close()
        cli.close()


def test_mknod_regular_file(d):
    os.mknod(d / "reg", stat.S_IFREG | 0o600)
    st = os.lstat(d / "reg")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 0


def test_mknod_errors(d):
    os.mkfifo(d / "fifo")
    expect_errno(errno.EEXIST, os.mkfifo, d / "fifo")
    expect_errno(errno.EEXIST, os.mknod, d / "fifo", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    expect_errno(errno.ENOENT, os.mkfifo, d / "missing" / "fifo")
    expect_errno(errno.EINVAL, os.mknod, d / "bad", 0o170000 | 0o600)


def test_special_files_unlink(d):
    os.mkfifo(d / "fifo")
    os.mknod(d / "chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.unlink(d / "fifo")
    os.unlink(d / "chr")
    assert os.listdir(d) == []
