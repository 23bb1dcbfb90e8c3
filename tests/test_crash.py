"""SIGKILL the mount daemon during a write-heavy workload, mount again, and check
that everything acknowledged is there and `aifs fsck` finds nothing.

A child process writes files; after each fsync+close (or plain close) returns it
appends a line to a log on the local disk. Whatever the log names must be intact
after the crash: fsynced files always, closed files too (docs/architecture.md:
close() survives a crash of the daemon, the kernel already holds the data).
"""

from __future__ import annotations

import os
import random
import signal
import stat
import time
from pathlib import Path

import pytest

from conftest import aifs_cli
from helpers import pattern, read_file, write_file

KiB = 1024
MiB = 1024 * KiB
ROUNDS = 3


@pytest.fixture(scope="module")
def crash_volume(make_volume):
    v = make_volume("crash")
    if not v.is_mount:
        pytest.skip("crash tests need a real aifs mount (AIFS_TEST_TARGET=local)")
    return v


@pytest.fixture
def cvol(crash_volume, watchdog):
    """The crash volume, mounted and healthy (a failed test may have left it down)."""
    crash_volume.ensure_mounted()
    return crash_volume


def _size_for(i: int) -> int:
    if i % 17 == 0:
        return 4 * MiB + 100 + i      # crosses a block boundary
    if i % 5 == 0:
        return 200 * KiB + i
    return (i * 7919) % (16 * KiB)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _workload(root: Path, log_path: Path, n_files: int) -> None:
    """Runs in a forked child until it is done or the mount dies under it."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        held = os.open(root / "held-open", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(held, pattern("held", 300 * KiB))
        os.unlink(root / "held-open")   # unlinked while open at the moment of the crash
        for i in range(n_files):
            sub = root / f"d{i % 8}"
            if i < 8:
                os.mkdir(sub)
            name = f"d{i % 8}/f{i:05d}"
            size = _size_for(i)
            kind = ("fsync", "close", "rename")[i % 3]
            target = name if kind != "rename" else name + ".tmp"
            fd = os.open(root / target, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            data = pattern(name, size)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[:MiB]):]
            if kind != "close":
                os.fsync(fd)
            os.close(fd)
            if kind == "rename":  # the checkpoint pattern: write tmp, fsync, rename, fsync dir
                os.rename(root / target, root / name)
                _fsync_dir(sub)
            os.write(log, f"{kind} {name} {size}\n".encode())
            if i % 10 == 9:  # churn: delete an acknowledged file (logged first: it may go)
                victim = f"d{(i - 9) % 8}/f{i - 9:05d}"
                os.write(log, f"unlink {victim} 0\n".encode())
                os.unlink(root / victim)
                _fsync_dir(root / f"d{(i - 9) % 8}")
    except OSError:
        pass  # the mount went away: expected
    finally:
        os.close(log)


def _start_workload(root: Path, log_path: Path, n_files: int) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _workload(root, log_path, n_files)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    return pid


def _read_log(log_path: Path) -> dict[str, tuple[str, int]]:
    state: dict[str, tuple[str, int]] = {}
    if not log_path.exists():
        return state
    for line in log_path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # torn last line
        kind, name, size = parts
        if kind == "unlink":
            state.pop(name, None)
        else:
            state[name] = (kind, int(size))
    return state


def _wait_log(log_path: Path, entries: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log_path.exists() and log_path.read_text().count("\n") >= entries:
            return
        time.sleep(0.02)


def _reap(pid: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _check_namespace(root: Path) -> list[str]:
    """Every entry is reachable and readable; directory link counts add up."""
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        st = os.lstat(dirpath)
        if st.st_nlink != 2 + len(dirnames):
            problems.append(f"{dirpath}: nlink {st.st_nlink}, {len(dirnames)} subdirs")
        for name in filenames:
            p = Path(dirpath, name)
            try:
                lst = os.lstat(p)
                if stat.S_ISREG(lst.st_mode):
                    got = len(read_file(p))
                    if got != lst.st_size:
                        problems.append(f"{p}: read {got} bytes, st_size {lst.st_size}")
            except OSError as e:
                problems.append(f"{p}: {e}")
    return problems


def _fsck(vol) -> None:
    cp = aifs_cli("fsck", "-c", str(vol.config), timeout=300)
    assert cp.returncode == 0, f"fsck found problems (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}"


@pytest.mark.timeout_s(600)
def test_sigkill_during_writes(cvol, tmp_path):
    for rnd in range(ROUNDS):
        root = cvol.path / f"round{rnd}"
        os.mkdir(root)
        log_path = tmp_path / f"log{rnd}"
        pid = _start_workload(root, log_path, n_files=2000)
        try:
            _wait_log(log_path, entries=40 + 30 * rnd, timeout=60)
            time.sleep(random.uniform(0, 0.3))  # land anywhere inside a write/fsync
        finally:
            killed = cvol.kill9()
            _reap(pid)
        acked = _read_log(log_path)
        assert len(acked) >= 20, f"round {rnd}: workload acknowledged only {len(acked)} files"

        cvol.mount()
        lost, wrong = [], []
        for name, (kind, size) in sorted(acked.items()):
            p = root / name
            try:
                data = read_file(p)
            except OSError as e:
                lost.append(f"{kind} {name}: {e}")
                continue
            if data != pattern(name, size):
                wrong.append(f"{kind} {name}: {len(data)} bytes, expected {size}")
        assert not lost and not wrong, (
            f"round {rnd} (killed {killed}): {len(acked)} acknowledged files; "
            f"lost {len(lost)}: {lost[:10]}; wrong content {len(wrong)}: {wrong[:10]}")
        for r in range(rnd):  # earlier rounds are untouched
            assert not _check_namespace(cvol.path / f"round{r}")
        problems = _check_namespace(root)
        assert not problems, f"round {rnd}: inconsistent namespace: {problems[:10]}"

        cvol.umount()
        _fsck(cvol)
        cvol.mount()


def test_fsck_clean_after_normal_use(cvol):
    root = cvol.path / "normal"
    os.mkdir(root)
    for i in range(50):
        write_file(root / f"f{i}", pattern(i, i * 1000))
    os.link(root / "f1", root / "hard")
    os.symlink("f2", root / "sym")
    os.unlink(root / "f3")
    write_file(root / "big", pattern("big", 9 * MiB))
    os.truncate(root / "big", 5 * MiB)
    cvol.umount()
    try:
        _fsck(cvol)
    finally:
        cvol.mount()
    assert read_file(root / "big") == pattern("big", 9 * MiB)[:5 * MiB]


def _files_containing(base: Path, needle: bytes) -> list[Path]:
    hits = []
    for dirpath, _, filenames in os.walk(base):
        for name in filenames:
            p = Path(dirpath, name)
            try:
                if p.stat().st_size >= len(needle) and needle in p.read_bytes():
                    hits.append(p)
            except OSError:
                pass
    return hits


def test_fsck_finds_missing_block(cvol):
    """Remove every stored copy of one file's data: fsck must report it (exit 1)."""
    root = cvol.path / "victim"
    os.mkdir(root)
    data = pattern("fsck-victim", 2 * MiB)
    write_file(root / "f", data, fsync=True)
    cvol.umount()
    moved: list[tuple[Path, Path]] = []
    try:
        hits = _files_containing(cvol.state_dir, data[MiB:MiB + 256])
        if not hits:
            pytest.skip("block data is not stored verbatim under the state dir")
        for h in hits:
            aside = h.with_name(h.name + ".aside")
            os.rename(h, aside)
            moved.append((h, aside))
        cp = aifs_cli("fsck", "-c", str(cvol.config), timeout=300)
        assert cp.returncode == 1, (
            f"fsck missed blocks removed from {[str(h) for h in hits]}: "
            f"exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    finally:
        for h, aside in moved:
            os.rename(aside, h)
    _fsck(cvol)
    cvol.mount()
    assert read_file(root / "f") == data
