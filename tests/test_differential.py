"""Differential test: random operation sequences applied in lockstep to aifs and
to a plain local directory; every result and errno must match, and after each
step both trees must look the same (types, modes, sizes, contents, link counts,
hard-link groups, symlink targets, xattrs; not inode numbers or times).

CI runs a bounded number of examples; set AIFS_DIFF_EXAMPLES=N for more,
AIFS_DIFF_STEPS=N for longer sequences and AIFS_DIFF_SHRINK=1 to minimise a failure.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, initialize, invariant,
                                 multiple, rule, run_state_machine_as_test)

from helpers import (RENAME_EXCHANGE, RENAME_NOREPLACE, describe_tree, digest, pattern,
                     renameat2)

MiB = 1024 * 1024
NB = os.O_NONBLOCK  # so that opening a FIFO never blocks

# A small alphabet so that names collide: 3 top-level names, 2 levels below.
NAMES = ["a", "b", "c"]
PATHS = NAMES + [f"{x}/{y}" for x in NAMES for y in NAMES] + ["a/a/a", "b/a/b"]

paths = st.sampled_from(NAMES * 3 + PATHS)  # top-level names a bit more often
symlink_targets = st.sampled_from(PATHS + ["../a", "../../c", "nowhere", "a/../b"])

# Every example starts from this tree (built on both sides by the same rules),
# so that most operations meet existing entries.
START_DIRS = ["a", "b", "a/a"]
START_FILES = {"c": 100, "a/b": 5000, "b/a": 70_000, "b/c": 0}
modes = st.sampled_from([0o644, 0o600, 0o755, 0o700, 0o777, 0o000, 0o4755, 0o2755, 0o1777])
offsets = st.one_of(st.integers(0, 70_000),
                    st.sampled_from([0, 1, 4095, 4096, 131_072, 4 * MiB - 3, 4 * MiB, 5 * MiB]))
lengths = st.one_of(st.integers(0, 64), st.integers(0, 20_000), st.sampled_from([4096, 131_073]))


class Blob(bytes):
    """Written data that prints as the call that made it, not as raw bytes."""

    label: str

    def __repr__(self) -> str:
        return self.label


def blob(seed: int, size: int) -> Blob:
    b = Blob(pattern(seed, size))
    b.label = f"pattern({seed}, {size})"
    return b


data = st.builds(blob, st.integers(0, 999), lengths)
xattr_names = st.sampled_from(["user.a", "user.b", "user.long" + "x" * 40])
xattr_values = st.binary(max_size=40)
xattr_flags = st.sampled_from([0, os.XATTR_CREATE, os.XATTR_REPLACE])
times_ns = st.one_of(st.integers(0, 2**33 * 10**9),
                     st.sampled_from([1, 10**9 - 1, 2**31 * 10**9, 4_102_444_800_123_456_789]))
open_flags = st.sampled_from([os.O_RDONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND,
                              os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_TRUNC,
                              os.O_RDWR | os.O_CREAT | os.O_EXCL])


# ---------------------------------------------------------------------------
# operations: each takes the root directory first, returns something comparable


def _open(root: Path, p: str, flags: int, mode: int = 0o644) -> int:
    return os.open(root / p, flags | NB, mode)


def _with_fd(root: Path, p: str, flags: int, fn: Callable[[int], Any], mode: int = 0o644) -> Any:
    fd = _open(root, p, flags, mode)
    try:
        return fn(fd)
    finally:
        os.close(fd)


def op_create(root, p, buf, mode):
    return _with_fd(root, p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, lambda fd: os.write(fd, buf),
                    mode)


def op_write_at(root, p, off, buf):
    return _with_fd(root, p, os.O_WRONLY, lambda fd: os.pwrite(fd, buf, off))


def op_pwrite_past_eof(root, p, gap, buf):
    return _with_fd(root, p, os.O_RDWR,
                    lambda fd: os.pwrite(fd, buf, os.fstat(fd).st_size + gap))


def op_append(root, p, buf):
    def go(fd):
        os.write(fd, buf)
        return os.lseek(fd, 0, os.SEEK_CUR)
    return _with_fd(root, p, os.O_WRONLY | os.O_APPEND, go)


def op_open_excl(root, p, mode):
    return _with_fd(root, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, lambda fd: None, mode)


def op_open_trunc(root, p):
    return _with_fd(root, p, os.O_WRONLY | os.O_TRUNC, lambda fd: os.fstat(fd).st_size)


def op_read_whole(root, p):
    def go(fd):
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        buf = b"".join(chunks)
        return len(buf), digest(buf)
    return _with_fd(root, p, os.O_RDONLY, go)


def op_pread(root, p, off, n):
    return digest(_with_fd(root, p, os.O_RDONLY, lambda fd: os.pread(fd, n, off)))


def op_truncate(root, p, length):
    os.truncate(root / p, length)


def op_rename(root, src, dst):
    os.rename(root / src, root / dst)


def op_rename2(root, src, dst, flags):
    renameat2(root / src, root / dst, flags)


def op_link(root, src, dst):
    os.link(root / src, root / dst, follow_symlinks=False)


def op_unlink(root, p):
    os.unlink(root / p)


def op_mkdir(root, p, mode):
    os.mkdir(root / p, mode)


def op_rmdir(root, p):
    os.rmdir(root / p)


def op_symlink(root, target, p):
    os.symlink(target, root / p)


def op_readlink(root, p):
    return os.readlink(root / p)


def op_mkfifo(root, p):
    os.mkfifo(root / p, 0o644)


def op_chmod(root, p, mode):
    os.chmod(root / p, mode)


def op_utime(root, p, atime, mtime, follow):
    os.utime(root / p, ns=(atime, mtime), follow_symlinks=follow)
    st_ = os.stat(root / p, follow_symlinks=follow)
    return st_.st_atime_ns, st_.st_mtime_ns


def op_setxattr(root, p, name, value, flags):
    os.setxattr(root / p, name, value, flags)


def op_getxattr(root, p, name):
    return os.getxattr(root / p, name)


def op_removexattr(root, p, name):
    os.removexattr(root / p, name)


def op_listxattr(root, p):
    return sorted(n for n in os.listxattr(root / p) if n.startswith("user."))


def op_listdir(root, p):
    return sorted(os.listdir(root / p))


def stat_fields(s: os.stat_result) -> tuple:
    kind = stat.S_IFMT(s.st_mode)
    size = s.st_size if kind in (stat.S_IFREG, stat.S_IFLNK) else None
    return kind, stat.S_IMODE(s.st_mode), size, s.st_nlink, s.st_uid, s.st_gid


def op_stat(root, p, follow):
    return stat_fields(os.stat(root / p, follow_symlinks=follow))


OLD_NS = 1_000_000_000 * 10**9


def op_write_bumps_mtime(root, p, off, buf):
    """Absolute times differ between the sides; that a write moves mtime on must not."""
    os.utime(root / p, ns=(OLD_NS, OLD_NS))
    _with_fd(root, p, os.O_WRONLY, lambda fd: os.pwrite(fd, buf, off))
    return os.stat(root / p).st_mtime_ns > OLD_NS


def op_entry_bumps_dir_mtime(root, p, name):
    os.utime(root / p, ns=(OLD_NS, OLD_NS))
    os.close(_open(root, f"{p}/{name}", os.O_CREAT | os.O_WRONLY))
    return os.stat(root / p).st_mtime_ns > OLD_NS


# ---------------------------------------------------------------------------


@dataclass
class FdPair:
    aifs: int
    local: int
    label: str


class _Ctx:
    aifs_base: Path
    local_base: Path
    counter = itertools.count()


CTX = _Ctx()


def outcome(fn: Callable[[], Any]) -> tuple:
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


class DifferentialMachine(RuleBasedStateMachine):
    fds = Bundle("fds")

    def __init__(self):
        super().__init__()
        n = next(CTX.counter)
        self.aifs = CTX.aifs_base / f"ex{n:04d}"
        self.local = CTX.local_base / f"ex{n:04d}"
        os.mkdir(self.aifs)
        os.mkdir(self.local)
        self.open_pairs: list[FdPair] = []

    # -- plumbing --------------------------------------------------------------
    def both(self, fn: Callable, *args: Any) -> tuple:
        a = outcome(lambda: fn(self.aifs, *args))
        b = outcome(lambda: fn(self.local, *args))
        assert a == b, f"{fn.__name__}{args!r}:\n  aifs:  {a!r}\n  local: {b!r}"
        return a

    def both_fd(self, pair: FdPair, fn: Callable, *args: Any) -> tuple:
        a = outcome(lambda: fn(pair.aifs, *args))
        b = outcome(lambda: fn(pair.local, *args))
        assert a == b, f"{fn.__name__}(fd {pair.label}){args!r}:\n  aifs:  {a!r}\n  local: {b!r}"
        return a

    @initialize()
    def start_tree(self):
        for p in START_DIRS:
            self.both(op_mkdir, p, 0o755)
        for p, size in START_FILES.items():
            self.both(op_create, p, pattern(p, size), 0o644)

    # -- namespace and data rules ----------------------------------------------------
    @rule(p=paths, buf=data, mode=modes)
    def create(self, p, buf, mode):
        self.both(op_create, p, buf, mode)

    @rule(p=paths, off=offsets, buf=data)
    def write_at(self, p, off, buf):
        self.both(op_write_at, p, off, buf)

    @rule(p=paths, gap=st.integers(1, 5 * MiB), buf=data)
    def pwrite_past_eof(self, p, gap, buf):
        self.both(op_pwrite_past_eof, p, gap, buf)

    @rule(p=paths, buf=data)
    def append(self, p, buf):
        self.both(op_append, p, buf)

    @rule(p=paths, mode=modes)
    def open_excl(self, p, mode):
        self.both(op_open_excl, p, mode)

    @rule(p=paths)
    def open_trunc(self, p):
        self.both(op_open_trunc, p)

    @rule(p=paths)
    def read_whole(self, p):
        self.both(op_read_whole, p)

    @rule(p=paths, off=offsets, n=st.integers(0, 10_000))
    def pread(self, p, off, n):
        self.both(op_pread, p, off, n)

    @rule(p=paths, length=st.one_of(offsets, st.just(-1)))
    def truncate(self, p, length):
        self.both(op_truncate, p, length)

    @rule(src=paths, dst=paths)
    def rename(self, src, dst):
        self.both(op_rename, src, dst)

    @rule(src=paths, dst=paths, flags=st.sampled_from([RENAME_NOREPLACE, RENAME_EXCHANGE]))
    def rename2(self, src, dst, flags):
        self.both(op_rename2, src, dst, flags)

    @rule(src=paths, dst=paths)
    def link(self, src, dst):
        self.both(op_link, src, dst)

    @rule(p=paths)
    def unlink(self, p):
        self.both(op_unlink, p)

    @rule(p=paths, mode=modes)
    def mkdir(self, p, mode):
        self.both(op_mkdir, p, mode)

    @rule(p=paths)
    def rmdir(self, p):
        self.both(op_rmdir, p)

    @rule(dest=symlink_targets, p=paths)
    def symlink(self, dest, p):
        self.both(op_symlink, dest, p)

    @rule(p=paths)
    def readlink(self, p):
        self.both(op_readlink, p)

    @rule(p=paths)
    def mkfifo(self, p):
        self.both(op_mkfifo, p)

    @rule(p=paths, mode=modes)
    def chmod(self, p, mode):
        self.both(op_chmod, p, mode)

    @rule(p=paths, atime=times_ns, mtime=times_ns, follow=st.booleans())
    def utime(self, p, atime, mtime, follow):
        self.both(op_utime, p, atime, mtime, follow)

    @rule(p=paths, name=xattr_names, value=xattr_values, flags=xattr_flags)
    def setxattr(self, p, name, value, flags):
        self.both(op_setxattr, p, name, value, flags)

    @rule(p=paths, name=xattr_names)
    def getxattr(self, p, name):
        self.both(op_getxattr, p, name)

    @rule(p=paths, name=xattr_names)
    def removexattr(self, p, name):
        self.both(op_removexattr, p, name)

    @rule(p=paths)
    def listxattr(self, p):
        self.both(op_listxattr, p)

    @rule(p=st.one_of(st.just("."), paths))
    def listdir(self, p):
        self.both(op_listdir, p)

    @rule(p=paths, follow=st.booleans())
    def stat(self, p, follow):
        self.both(op_stat, p, follow)

    @rule(p=paths, off=offsets, buf=st.builds(blob, st.integers(0, 99), st.integers(1, 5000)))
    def write_bumps_mtime(self, p, off, buf):
        self.both(op_write_bumps_mtime, p, off, buf)

    @rule(p=st.sampled_from(["."] + PATHS), name=st.sampled_from(NAMES))
    def entry_bumps_dir_mtime(self, p, name):
        self.both(op_entry_bumps_dir_mtime, p, name)

    # -- open file descriptors ----------------------------------------------------------
    @rule(target=fds, p=paths, flags=open_flags)
    def open_fd(self, p, flags):
        a = outcome(lambda: _open(self.aifs, p, flags))
        b = outcome(lambda: _open(self.local, p, flags))
        if a[0] == "ok" and b[0] == "ok":
            pair = FdPair(a[1], b[1], f"{p}:{flags:#o}")
            self.open_pairs.append(pair)
            return pair
        for o in (a, b):  # do not leak the one that did open
            if o[0] == "ok":
                os.close(o[1])
        assert a[0] == b[0] and a == b, f"open({p!r}, {flags:#o}): aifs {a!r} local {b!r}"
        return multiple()

    @rule(pair=fds, off=offsets, buf=data)
    def fd_pwrite(self, pair, off, buf):
        self.both_fd(pair, os.pwrite, buf, off)

    @rule(pair=fds, buf=data)
    def fd_write(self, pair, buf):
        self.both_fd(pair, os.write, buf)

    @rule(pair=fds, off=offsets, n=st.integers(0, 10_000))
    def fd_pread(self, pair, off, n):
        self.both_fd(pair, lambda fd: digest(os.pread(fd, n, off)))

    @rule(pair=fds)
    def fd_fstat(self, pair):
        self.both_fd(pair, lambda fd: stat_fields(os.fstat(fd)))

    @rule(pair=fds, length=offsets)
    def fd_ftruncate(self, pair, length):
        self.both_fd(pair, os.ftruncate, length)

    @rule(pair=fds)
    def fd_fsync(self, pair):
        self.both_fd(pair, os.fsync)

    @rule(pair=consumes(fds))
    def fd_close(self, pair):
        self.open_pairs.remove(pair)
        self.both_fd(pair, os.close)

    # -- after every step ----------------------------------------------------------------
    @invariant()
    def trees_match(self):
        a = describe_tree(self.aifs, times=False)
        b = describe_tree(self.local, times=False)
        if a != b:
            only_a = sorted(set(a) - set(b))
            only_b = sorted(set(b) - set(a))
            diffs = [f"  {k}: aifs {a[k]} != local {b[k]}" for k in sorted(set(a) & set(b))
                     if a[k] != b[k]]
            raise AssertionError(f"trees differ: only on aifs {only_a}, only local {only_b}\n"
                                 + "\n".join(diffs))

    def teardown(self):
        for pair in self.open_pairs:
            for fd in (pair.aifs, pair.local):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.open_pairs.clear()
        shutil.rmtree(self.local)
        shutil.rmtree(self.aifs)


def diff_settings() -> settings:
    phases = list(Phase)
    if os.environ.get("AIFS_DIFF_SHRINK", "0") != "1":
        # Shrinking a failure can take minutes; the failing steps are printed either
        # way. AIFS_DIFF_SHRINK=1 asks for a minimal reproduction.
        phases.remove(Phase.shrink)
    return settings(
        max_examples=int(os.environ.get("AIFS_DIFF_EXAMPLES", "60")),
        stateful_step_count=int(os.environ.get("AIFS_DIFF_STEPS", "30")),
        deadline=None,
        database=None,
        phases=phases,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.timeout_s(1800)
def test_differential(d, local_dir):
    CTX.aifs_base, CTX.local_base = d, local_dir
    run_state_machine_as_test(DifferentialMachine, settings=diff_settings())
