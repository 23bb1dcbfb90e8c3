"""flock and POSIX fcntl locks across two nodes of one volume (two mounts, one redis-server,
one bucket): a lock taken on one node holds on the other, waiters there get it once it is
released or its node dies, and what was written under it is there for the next holder."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers_cluster import SESSION_TIMEOUT_S, make_cluster, mount_all, redis_server  # noqa: F401 - fixtures
from .helpers_mount import make_s3_volume, wait_for  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout_s(240)

FLOCK_FMT = "hhqqi"  # struct flock on x86-64: l_type, l_whence, l_start, l_len, l_pid
SOON_S = 30.0  # bound on what must happen soon (a hang guard, not a measurement)
HELD_S = 0.5  # how long a blocked waiter is watched for (wrongly) getting the lock
GRANTED_AFTER_DEATH_S = 10 * SESSION_TIMEOUT_S  # the dead node is noticed within the session timeout

WAITER = """
import fcntl, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
print("waiting", flush=True)
if how == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
else:
    fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
print("granted", flush=True)
sys.stdin.read()  # holds the lock until told to go
"""


class Waiter:
    """A process on some node that waits for an exclusive lock (flock, or lockf of bytes 0-99)
    and holds it until it is stopped."""

    def __init__(self, path: Path, how: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", WAITER, str(path), how], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.line(SOON_S) == "waiting"

    def line(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        return self.process.stdout.readline().strip() if ready else None

    def stop(self) -> int:
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=SOON_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def nodes(make_cluster):
    """The mountpoints of two nodes, and a maker of waiters that are stopped at teardown."""
    waiters: list[Waiter] = []

    def waiter_on(path: Path, how: str) -> Waiter:
        waiters.append(Waiter(path, how))
        return waiters[-1]

    a, b = mount_all(make_cluster(2))
    yield a, b, waiter_on
    for waiter in waiters:
        waiter.stop()


def _getlk(fd: int, ltype: int, start: int, length: int) -> tuple[int, int, int, int]:
    req = struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0)
    l_type, _, l_start, l_len, l_pid = struct.unpack(FLOCK_FMT, fcntl.fcntl(fd, fcntl.F_GETLK, req))
    return l_type, l_start, l_len, l_pid


def _errno_of(fn, *args) -> int | None:
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return None


def test_flock_on_one_node_holds_on_the_other(nodes) -> None:
    a, b, waiter_on = nodes
    (a / "lock").write_bytes(b"")
    holder, other = os.open(a / "lock", os.O_RDONLY), os.open(b / "lock", os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_SH)
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared on both nodes at once
        assert _errno_of(fcntl.flock, other, fcntl.LOCK_EX | fcntl.LOCK_NB) == errno.EWOULDBLOCK
        fcntl.flock(other, fcntl.LOCK_UN)
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert _errno_of(fcntl.flock, other, fcntl.LOCK_SH | fcntl.LOCK_NB) == errno.EWOULDBLOCK
        waiter = waiter_on(b / "lock", "flock")
        assert waiter.line(HELD_S) is None, "B's waiter got the lock while A held it"
        fcntl.flock(holder, fcntl.LOCK_UN)
        assert waiter.line(SOON_S) == "granted"
        assert _errno_of(fcntl.flock, holder, fcntl.LOCK_EX | fcntl.LOCK_NB) == errno.EWOULDBLOCK
        assert waiter.stop() == 0
        # the waiter's exit releases it: the kernel sends that release after the exit, not before
        wait_for(lambda: _errno_of(fcntl.flock, holder, fcntl.LOCK_EX | fcntl.LOCK_NB) is None,
                 "the lock to be released by the waiter's exit", timeout=SOON_S)
    finally:
        os.close(holder)
        os.close(other)


def test_fcntl_locks_on_one_node_hold_on_the_other(nodes) -> None:
    a, b, waiter_on = nodes
    (a / "ranges").write_bytes(bytes(1000))
    holder, other = os.open(a / "ranges", os.O_RDWR), os.open(b / "ranges", os.O_RDWR)
    try:
        fcntl.lockf(holder, fcntl.LOCK_EX, 100, 0)
        fcntl.lockf(holder, fcntl.LOCK_SH, 100, 500)
        assert _getlk(other, fcntl.F_WRLCK, 50, 1) == (fcntl.F_WRLCK, 0, 100, 0), "pid 0: held elsewhere"
        assert _getlk(other, fcntl.F_WRLCK, 550, 0) == (fcntl.F_RDLCK, 500, 100, 0)
        assert _getlk(other, fcntl.F_RDLCK, 550, 10)[0] == fcntl.F_UNLCK
        refused = _errno_of(fcntl.lockf, other, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 99)
        assert refused in (errno.EAGAIN, errno.EACCES)
        fcntl.lockf(other, fcntl.LOCK_SH | fcntl.LOCK_NB, 10, 550)  # readers on both nodes
        fcntl.lockf(other, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 200)  # beside A's locks
        waiter = waiter_on(b / "ranges", "posix")
        assert waiter.line(HELD_S) is None, "B's waiter got the lock while A held it"
        os.close(os.open(a / "ranges", os.O_RDONLY))  # any close on A drops A's locks
        assert waiter.line(SOON_S) == "granted"
        assert _getlk(holder, fcntl.F_WRLCK, 0, 0)[:3] == (fcntl.F_WRLCK, 0, 100)
    finally:
        os.close(holder)
        os.close(other)


def test_a_lock_of_a_killed_node_goes_to_a_waiter_on_the_other(make_cluster) -> None:
    nodes = make_cluster(2)
    a, b = mount_all(nodes)
    (a / "lock").write_bytes(bytes(100))
    holder = os.open(a / "lock", os.O_RDWR)
    waiters = []
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        fcntl.lockf(holder, fcntl.LOCK_EX, 100, 0)
        waiters = [Waiter(b / "lock", how) for how in ("flock", "posix")]
        assert [waiter.line(HELD_S) for waiter in waiters] == [None, None]
        nodes[0].kill9()
        assert [waiter.line(GRANTED_AFTER_DEATH_S) for waiter in waiters] == ["granted", "granted"]
    finally:
        with contextlib.suppress(OSError):  # the mount under it is gone
            os.close(holder)
        for waiter in waiters:
            waiter.stop()


def test_a_killed_waiter_takes_nothing_and_the_lock_stays_with_its_holder(nodes) -> None:
    a, b, waiter_on = nodes
    (a / "lock").write_bytes(bytes(100))
    holder = os.open(a / "lock", os.O_RDWR)
    try:
        fcntl.lockf(holder, fcntl.LOCK_EX, 100, 0)
        waiter = waiter_on(b / "lock", "posix")
        waiter.process.send_signal(signal.SIGKILL)
        assert waiter.stop() == -signal.SIGKILL
        other = os.open(b / "lock", os.O_RDWR)
        try:
            assert _getlk(other, fcntl.F_WRLCK, 0, 0)[:3] == (fcntl.F_WRLCK, 0, 100)
            fcntl.lockf(holder, fcntl.LOCK_UN, 100, 0)
            fcntl.lockf(other, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)
        finally:
            os.close(other)
    finally:
        os.close(holder)


def _read_under_lock(path: Path, lock) -> bytes:
    fd = os.open(path, os.O_RDWR)
    try:
        lock(fd)
        return os.pread(fd, 1000, 0)
    finally:
        os.close(fd)


FLOCK = (lambda fd: fcntl.flock(fd, fcntl.LOCK_EX), lambda fd: fcntl.flock(fd, fcntl.LOCK_UN))
LOCKF = (lambda fd: fcntl.lockf(fd, fcntl.LOCK_EX), lambda fd: fcntl.lockf(fd, fcntl.LOCK_UN))


def test_what_a_holder_wrote_is_there_for_the_next_holder_on_another_node(nodes) -> None:
    """The writer keeps its file open: its unlock, not a close, stores what it wrote."""
    a, b, _ = nodes
    payload = b"written under the lock on A; "
    (a / "shared").write_bytes(b"")
    writer = os.open(a / "shared", os.O_RDWR)
    try:
        for rounds, (lock, unlock) in enumerate((FLOCK, LOCKF), start=1):
            lock(writer)
            os.write(writer, payload)
            unlock(writer)
            assert _read_under_lock(b / "shared", lock) == payload * rounds
    finally:
        os.close(writer)
