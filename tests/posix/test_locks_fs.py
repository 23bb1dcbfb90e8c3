"""flock and POSIX fcntl locks on one mount behave as on a local directory: each story runs on
both, from this process and from child processes, and what the processes see must match."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_as, write_file

FLOCK_FMT = "hhqqi"  # struct flock on x86-64: l_type, l_whence, l_start, l_len, l_pid
WAIT_S = 30.0  # bound on anything a child is expected to do soon
HELD_S = 0.3  # how long a blocked child is watched for (wrongly) getting the lock

def _getlk(fd: int, ltype: int, start: int, length: int, cmd: int = fcntl.F_GETLK) -> tuple:
    req = struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0)
    l_type, _, l_start, l_len, l_pid = struct.unpack(FLOCK_FMT, fcntl.fcntl(fd, cmd, req))
    return l_type, l_start, l_len, l_pid


def _setlk(fd: int, ltype: int, start: int, length: int, cmd: int = fcntl.F_SETLK) -> None:
    fcntl.fcntl(fd, cmd, struct.pack(FLOCK_FMT, ltype, os.SEEK_SET, start, length, 0))


def _outcome(fn, *args) -> str:
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return os.strerror(e.errno)


def _probe(path: Path, ltype: int, start: int, length: int, parent: int) -> tuple:
    """In a child: what F_GETLK reports (the parent's pid named as such), then whether a lock
    of this range can be taken without waiting."""
    fd = os.open(path, os.O_RDWR)
    try:
        l_type, l_start, l_len, l_pid = _getlk(fd, ltype, start, length)
        shown = (l_type, l_start, l_len, "parent" if l_pid == parent else l_pid)
        if l_type == fcntl.F_UNLCK:
            shown = ("unlocked",)
        return shown, _outcome(_setlk, fd, ltype, start, length)
    finally:
        os.close(fd)


def _try_flock(path: Path, how: int) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _outcome(fcntl.flock, fd, how | fcntl.LOCK_NB)
    finally:
        os.close(fd)


PROBES = [(fcntl.F_WRLCK, 0, 1), (fcntl.F_RDLCK, 39, 2), (fcntl.F_RDLCK, 45, 10), (fcntl.F_WRLCK, 99, 1),
          (fcntl.F_RDLCK, 100, 400), (fcntl.F_WRLCK, 550, 1), (fcntl.F_RDLCK, 550, 100),
          (fcntl.F_RDLCK, 5000, 1), (fcntl.F_WRLCK, 600, 400), (fcntl.F_WRLCK, 0, 0)]


def byte_range_story(root: Path) -> list:
    """Locks taken, split, merged, converted and released by one process, as others see them."""
    path = root / "ranges"
    write_file(path, bytes(4096))
    seen = []

    def look(step: str) -> None:
        seen.append((step, [run_as(_probe, path, *probe, os.getpid()) for probe in PROBES]))

    fd = os.open(path, os.O_RDWR)
    try:
        _setlk(fd, fcntl.F_WRLCK, 0, 100)
        _setlk(fd, fcntl.F_RDLCK, 500, 100)
        _setlk(fd, fcntl.F_WRLCK, 1000, 0)
        look("taken")
        _setlk(fd, fcntl.F_UNLCK, 40, 20)
        look("middle unlocked")
        _setlk(fd, fcntl.F_RDLCK, 100, 400)
        _setlk(fd, fcntl.F_RDLCK, 600, 400)
        look("read locks merged")
        _setlk(fd, fcntl.F_RDLCK, 0, 40)
        look("downgraded")
        seen.append(("own lock is no conflict", _getlk(fd, fcntl.F_WRLCK, 0, 0)[0]))
        run_as(os.close, fd)
        look("a child closed its copy of the fd")
        os.close(os.open(path, os.O_RDONLY))
        look("another fd of the file closed")
    finally:
        os.close(fd)
    return seen


def test_byte_range_locks_as_on_a_local_directory(d, local_dir):
    assert byte_range_story(d) == byte_range_story(local_dir)


def flock_story(root: Path) -> list:
    """flock locks belong to an open file: dup'd and inherited descriptors share them."""
    path = root / "flocked"
    write_file(path, b"x")
    seen = []
    first, second = os.open(path, os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(first, fcntl.LOCK_SH)
        seen.append(("shared: another shared", run_as(_try_flock, path, fcntl.LOCK_SH)))
        seen.append(("shared: exclusive", run_as(_try_flock, path, fcntl.LOCK_EX)))
        fcntl.flock(first, fcntl.LOCK_EX)
        seen.append(("converted: shared", run_as(_try_flock, path, fcntl.LOCK_SH)))
        seen.append(("second open file of this process",
                     _outcome(fcntl.flock, second, fcntl.LOCK_SH | fcntl.LOCK_NB)))
        seen.append(("inherited descriptor",
                     run_as(_outcome, fcntl.flock, first, fcntl.LOCK_EX | fcntl.LOCK_NB)))
        copy = os.dup(first)
        os.close(first)
        first = -1
        seen.append(("original closed, dup open", run_as(_try_flock, path, fcntl.LOCK_SH)))
        os.close(copy)
        seen.append(("all closed", run_as(_try_flock, path, fcntl.LOCK_EX)))
        fcntl.flock(second, fcntl.LOCK_SH)
        fcntl.flock(second, fcntl.LOCK_UN)
        seen.append(("unlocked", run_as(_try_flock, path, fcntl.LOCK_EX)))
    finally:
        for fd in (first, second):
            if fd >= 0:
                os.close(fd)
    return seen


def test_flock_as_on_a_local_directory(d, local_dir):
    assert flock_story(d) == flock_story(local_dir)


def ofd_story(root: Path) -> list:
    """Open file description locks (F_OFD_*): held by an open file, released at its last close."""
    path = root / "ofd"
    write_file(path, bytes(100))
    seen = []
    first, second = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        _setlk(first, fcntl.F_WRLCK, 0, 10, fcntl.F_OFD_SETLK)
        seen.append(("other open file", _outcome(_setlk, second, fcntl.F_WRLCK, 5, 1, fcntl.F_OFD_SETLK)))
        seen.append(("seen from it", _getlk(second, fcntl.F_WRLCK, 0, 0, fcntl.F_OFD_GETLK)[:3]))
        seen.append(("beside it", _outcome(_setlk, second, fcntl.F_WRLCK, 10, 5, fcntl.F_OFD_SETLK)))
        os.close(first)
        first = -1
        seen.append(("after its last close",
                     _outcome(_setlk, second, fcntl.F_WRLCK, 0, 10, fcntl.F_OFD_SETLK)))
    finally:
        for fd in (first, second):
            if fd >= 0:
                os.close(fd)
    return seen


def test_open_file_description_locks_as_on_a_local_directory(d, local_dir):
    assert ofd_story(d) == ofd_story(local_dir)


# -- waiting -----------------------------------------------------------------------------

WAITER = """
import fcntl, os, signal, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if how == "alarm":
    def give_up(*_):
        raise TimeoutError
    signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
print("waiting", flush=True)
try:
    if how == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
    print("granted", flush=True)
except TimeoutError:
    print("gave up", flush=True)
"""


def _start_waiter(path: Path, how: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", WAITER, str(path), how],
                             stdout=subprocess.PIPE, text=True)
    assert _line(child) == "waiting"
    return child


def _line(child: subprocess.Popen, timeout: float = WAIT_S) -> str | None:
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    return child.stdout.readline().strip() if ready else None


def _finish(child: subprocess.Popen) -> int | None:
    """The child's exit status; None when it had not ended and was killed."""
    try:
        return child.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in a request nobody answers
            child.wait(timeout=WAIT_S)
        return None


def waiting_story(root: Path) -> list:
    """A child waiting for a lock gets it once this process lets go; a signal or SIGKILL ends
    its wait."""
    path = root / "waited"
    write_file(path, bytes(100))
    seen = []
    fd = os.open(path, os.O_RDWR)
    try:
        for how, unlock in (("posix", lambda: fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)),
                            ("flock", lambda: fcntl.flock(fd, fcntl.LOCK_UN))):
            fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
            fcntl.flock(fd, fcntl.LOCK_EX)
            child = _start_waiter(path, how)
            seen.append((how, "while held", _line(child, HELD_S)))
            unlock()
            seen.append((how, "after unlock", _line(child), _finish(child)))
            fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        child = _start_waiter(path, "alarm")
        seen.append(("signal", _line(child), _finish(child)))
        child = _start_waiter(path, "posix")
        child.send_signal(signal.SIGKILL)
        seen.append(("SIGKILL", _finish(child)))
        seen.append(("still held", run_as(_probe, path, fcntl.F_WRLCK, 0, 1, os.getpid())))
    finally:
        os.close(fd)
    return seen


def test_waiting_for_a_lock_as_on_a_local_directory(d, local_dir):
    assert waiting_story(d) == waiting_story(local_dir)


def test_a_mount_stopped_while_a_request_waits_for_a_lock_still_stops(make_volume):
    """SIGTERM while a process waits for a lock: the wait ends, so the daemon can unmount."""
    vol = make_volume("locks-stop")
    if not vol.is_mount:
        pytest.skip("needs a real aifs mount (AIFS_TEST_TARGET=local)")
    path = vol.path / "held"
    write_file(path, bytes(100))
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        child = _start_waiter(path, "posix")
        assert _line(child, HELD_S) is None
        for pid in vol.daemon_pids():
            os.kill(pid, signal.SIGTERM)
        vol._wait_daemons_gone(timeout=WAIT_S)
        stuck = vol.daemon_pids()
        if stuck:
            vol.abort_connection()  # lets the waiter (and this test) go
        assert not stuck, "the daemon did not stop while a request waited for a lock"
        assert _finish(child) not in (0, None), "the waiter's request failed: no mount is left to grant it"
    finally:
        with contextlib.suppress(OSError):  # the mount under it is gone
            os.close(fd)
