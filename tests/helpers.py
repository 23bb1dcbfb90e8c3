"""Shared helpers for the POSIX, differential, program and crash tests.

Everything here talks to the filesystem only through ``os``, ``open``,
``ctypes`` (for the few calls Python does not wrap) and ``fork``.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import pickle
import random
import select
import signal
import stat
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

# --------------------------------------------------------------------------
# libc calls Python does not expose

_libc = ctypes.CDLL(None, use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def _raise_errno(*paths: Any) -> None:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err), *[os.fspath(p) for p in paths[:1]],
                  None, *[os.fspath(p) for p in paths[1:2]])


def renameat2(src: os.PathLike | str, dst: os.PathLike | str, flags: int) -> None:
    """rename(2) with RENAME_NOREPLACE / RENAME_EXCHANGE, relative to the cwd."""
    fn = _libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        _raise_errno(src, dst)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _ts(value: int | None | str) -> _Timespec:
    if value == "now":
        return _Timespec(0, UTIME_NOW)
    if value == "omit":
        return _Timespec(0, UTIME_OMIT)
    sec, nsec = divmod(int(value), 1_000_000_000)
    return _Timespec(sec, nsec)


def utimensat(path: os.PathLike | str, atime: int | str, mtime: int | str,
              follow_symlinks: bool = True) -> None:
    """utimensat(2); each time is nanoseconds since the epoch, "now" or "omit"."""
    times = (_Timespec * 2)(_ts(atime), _ts(mtime))
    fn = _libc.utimensat
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    flags = 0 if follow_symlinks else AT_SYMLINK_NOFOLLOW
    if fn(AT_FDCWD, os.fsencode(path), ctypes.byref(times), flags) != 0:
        _raise_errno(path)


# --------------------------------------------------------------------------
# errno helpers


def errno_of(fn: Callable, *args: Any, **kwargs: Any) -> int | None:
    """Run fn and return the errno of the OSError it raised, or None."""
    try:
        fn(*args, **kwargs)
    except OSError as e:
        return e.errno
    return None


def expect_errno(expected: int | tuple[int, ...], fn: Callable, *args: Any, **kwargs: Any) -> None:
    wanted = expected if isinstance(expected, tuple) else (expected,)
    got = errno_of(fn, *args, **kwargs)
    names = [errno.errorcode.get(e, str(e)) for e in wanted]
    assert got in wanted, (
        f"{getattr(fn, '__name__', fn)}{args!r}: expected {names}, "
        f"got {errno.errorcode.get(got, got) if got else 'success'}")


# --------------------------------------------------------------------------
# data


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64)
                for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


SYS_CACHESTAT = 451  # x86_64 and arm64 alike; Linux 6.5 and later


def cached_pages(fd: int, offset: int = 0, length: int = 0) -> int:
    """How many of the file's pages (from `offset`, `length` bytes; 0: to the end) the
    kernel's page cache holds (cachestat(2)), without touching them the way mmap and mincore
    would."""
    span, stat_ = _CachestatRange(offset, length), _Cachestat()
    if _libc.syscall(SYS_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat_), 0) != 0:
        _raise_errno()
    return stat_.nr_cache


def pattern(seed: Any, size: int) -> bytes:
    """Deterministic pseudo-random bytes (offset bugs show up, unlike one fill byte)."""
    return random.Random(str(seed)).randbytes(size)


def write_file(path: os.PathLike | str, data: bytes, mode: int = 0o644, fsync: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def tick() -> None:
    """Let the clock move past the filesystem's timestamp granularity (ext4: a jiffy)."""
    time.sleep(0.02)


def read_file(path: os.PathLike | str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# running code in another process, optionally as another user


class ChildError(Exception):
    """The child raised something other than OSError."""


def run_as(fn: Callable, *args: Any, uid: int | None = None, gid: int | None = None,
           groups: tuple[int, ...] = (), umask: int | None = None, timeout: float = 60.0) -> Any:
    """Fork; in the child drop to uid/gid (if given), run fn(*args); return its result.

    An OSError raised in the child is re-raised in the parent with the same errno,
    so ``expect_errno(errno.EACCES, run_as, os.open, path, os.O_RDONLY, uid=...)``
    reads naturally.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            try:
                if umask is not None:
                    os.umask(umask)
                if gid is not None:
                    os.setgroups(list(groups))
                    os.setresgid(gid, gid, gid)
                if uid is not None:
                    os.setresuid(uid, uid, uid)
                result = ("ok", fn(*args))
            except OSError as e:
                result = ("oserror", e.errno, str(e))
            except BaseException as e:  # noqa: BLE001 - report everything
                result = ("exc", repr(e))
            try:
                payload = pickle.dumps(result)
            except Exception as e:  # noqa: BLE001
                payload = pickle.dumps(("exc", f"unpicklable result: {e!r}"))
            os.write(w, payload)
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"child running {fn} did not finish in {timeout}s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not chunks:
        raise ChildError("child died without reporting")
    result = pickle.loads(b"".join(chunks))
    if result[0] == "ok":
        return result[1]
    if result[0] == "oserror":
        raise OSError(result[1], result[2])
    raise ChildError(result[1])


def run_parallel(fn: Callable, arg_list: list[tuple], timeout: float = 120.0) -> None:
    """Run fn(*args) for every args in its own forked process, all at once; fail if
    any of them raises or they do not all finish in time."""
    pids = []
    for args in arg_list:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001
                import traceback
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    deadline = time.monotonic() + timeout
    failed = []
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(pid)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                failed.append(pid)
                break
            time.sleep(0.01)
    assert not failed, f"{len(failed)} of {len(pids)} workers failed or hung"


# --------------------------------------------------------------------------
# comparing trees


def list_xattrs(path: os.PathLike | str, follow: bool = False) -> dict[str, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=follow)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EPERM):
            return {}
        raise
    return {n: os.getxattr(path, n, follow_symlinks=follow) for n in sorted(names)
            if n.startswith("user.")}


def describe_tree(root: os.PathLike | str, *, times: bool = True, owners: bool = True,
                  xattrs: bool = True) -> dict[str, dict]:
    """One entry per path below root: type, mode, size, content hash, link target,
    nlink, times and hard-link groups (expressed as the first path seen for an inode)."""
    root = Path(root)
    out: dict[str, dict] = {}
    first_path_of_inode: dict[int, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            st = os.lstat(p)
            e: dict[str, Any] = {"type": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode)}
            if owners:
                e["uid"], e["gid"] = st.st_uid, st.st_gid
            if stat.S_ISREG(st.st_mode):
                e["size"] = st.st_size
                e["sha"] = digest(read_file(p))
                e["nlink"] = st.st_nlink
                e["link_group"] = first_path_of_inode.setdefault(st.st_ino, rel)
            elif stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                e["nlink"] = st.st_nlink
            else:
                e["rdev"] = st.st_rdev
            if times and not stat.S_ISLNK(st.st_mode):
                e["mtime_ns"] = st.st_mtime_ns
            if xattrs and not stat.S_ISLNK(st.st_mode):
                e["xattrs"] = list_xattrs(p)
            out[rel] = e
    return out


def assert_same_tree(a: os.PathLike | str, b: os.PathLike | str, **kwargs: Any) -> None:
    ta, tb = describe_tree(a, **kwargs), describe_tree(b, **kwargs)
    assert sorted(ta) == sorted(tb), (
        f"names differ: only in {a}: {sorted(set(ta) - set(tb))}, "
        f"only in {b}: {sorted(set(tb) - set(ta))}")
    diffs = [f"{k}: {ta[k]} != {tb[k]}" for k in sorted(ta) if ta[k] != tb[k]]
    assert not diffs, "trees differ:\n" + "\n".join(diffs[:20])


def make_sample_tree(root: Path, seed: str = "tree") -> None:
    """A small tree with every kind of entry tar/cp/git must carry over."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "empty_dir").mkdir()
    (root / "a" / "b" / "c").mkdir(parents=True)
    files = {
        "empty": b"",
        "small.txt": b"hello world\n",
        "a/mid.bin": pattern("mid", 70_000),
        "a/b/big.bin": pattern("big", 5 * 1024 * 1024 + 123),
        "a/b/c/deep.txt": b"deep\n" * 100,
        "exec.sh": b"#!/bin/sh\necho hi\n",
        "private": b"secret\n",
    }
    for rel, data in files.items():
        write_file(root / rel, data)
    os.chmod(root / "exec.sh", 0o755)
    os.chmod(root / "private", 0o600)
    os.chmod(root / "a" / "b", 0o750)
    os.link(root / "a" / "mid.bin", root / "hardlink.bin")
    os.symlink("a/b/c/deep.txt", root / "rel_link")
    os.symlink("/nonexistent/target", root / "dangling_link")
    os.symlink("a", root / "dir_link")
    with open(root / "sparse", "wb") as f:
        f.seek(3 * 1024 * 1024)
        f.write(b"tail")
    os.setxattr(root / "small.txt", "user.tag", b"value")
    # whole-second times (so archive formats with second precision round-trip),
    # a function of the path only; children first so parents keep theirs
    for p in sorted(root.rglob("*"), key=lambda x: (-len(x.parts), str(x))):
        rel = str(p.relative_to(root))
        t = 1_600_000_000 + random.Random(f"{seed}:{rel}").randrange(10_000_000)
        os.utime(p, ns=(t * 10**9, t * 10**9), follow_symlinks=False)
    os.utime(root, ns=(1_600_000_000 * 10**9,) * 2)


def random_page_reads(path: os.PathLike | str, offsets: list[int], size: int = 4096) -> list[bytes]:
    """One pread of `size` at each offset, as a random reader does: the kernel is told the
    access is random, so it reads nothing ahead and each pread reaches the filesystem."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return [os.pread(fd, size, offset) for offset in offsets]
    finally:
        os.close(fd)


def tree_digest(*roots: Path) -> dict[str, tuple[int, str]]:
    """Every file under the roots with its size and sha256: what a check must not change. The
    log is left out: it is the one file a checker may append to."""
    return {str(path): (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
            for root in roots for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink() and path.name != "aifs.log"}


# --------------------------------------------------------------------------
# metrics


METRICS_CONFIG = """\
[volume]
state_dir = "{state}"
block_size = "64KiB"

[[tiers]]
kind = "ram"
capacity = "1MiB"

[[tiers]]
kind = "nvme"
capacity = "64MiB"

[[tiers]]
kind = "objstore"

[metrics]
listen = "{listen}"
"""


LOCAL_TIERS = """\
[[tiers]]
kind = "ram"
capacity = "64MiB"

[[tiers]]
kind = "nvme"
capacity = "1GiB"
"""  # the RAM and NVMe tiers of the tests' small volumes, for configs that add their own bottom tier


def metrics_config(directory: Path, listen: str, extra: str = "") -> Path:
    """A small local volume's config in `directory` (its state beside it) serving metrics on
    `listen`, with `extra` lines appended to its [metrics] table."""
    path = directory / "aifs.toml"
    path.write_text(METRICS_CONFIG.format(state=directory / "state", listen=listen) + extra)
    return path


def metrics_text(port: int) -> str:
    """The exposition a metrics endpoint on 127.0.0.1 serves, past any proxy settings."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


LARGE_BUFFER = 4096


def explain_buffer_difference(left: Any, right: Any) -> list[str] | None:
    """A few lines on how two large byte buffers differ (lengths, the first differing
    offset, the bytes there, digests), in place of pytest's text diff, which for buffers of
    megabytes runs for minutes; None for anything else, which pytest then explains itself."""
    kinds = (bytes, bytearray, memoryview)
    if not (isinstance(left, kinds) and isinstance(right, kinds)):
        return None
    left, right = bytes(left), bytes(right)
    if max(len(left), len(right)) <= LARGE_BUFFER:
        return None
    first = _first_difference(left, right)
    window = slice(max(0, first - 8), first + 24)
    return [f"buffers of {len(left):,} and {len(right):,} bytes differ first at offset {first:,}",
            f"left  [{window.start:,}:]: {left[window].hex(' ')}",
            f"right [{window.start:,}:]: {right[window].hex(' ')}",
            f"sha256 {hashlib.sha256(left).hexdigest()} != {hashlib.sha256(right).hexdigest()}"]


def _first_difference(left: bytes, right: bytes, chunk: int = 1 << 16) -> int:
    """Offset of the first byte that differs (the shorter length when one is a prefix),
    found chunk by chunk so a gigabyte costs milliseconds."""
    start = next((i for i in range(0, min(len(left), len(right)), chunk)
                  if left[i:i + chunk] != right[i:i + chunk]), None)
    if start is None:
        return min(len(left), len(right))
    pairs = zip(left[start:start + chunk], right[start:start + chunk])
    return start + next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(left), len(right)) - start)
