"""Fixtures that mount a fresh aifs volume with FUSE (or, with
``AIFS_TEST_TARGET=local``, hand out a plain local directory instead so the tests
themselves can be checked against a real kernel filesystem).

* ``vol``       session-scoped Volume: ``.path``, ``.state_dir``, ``.config``,
                ``mount()``, ``umount()``, ``remount()``, ``kill9()``.
* ``d``         a fresh empty directory on ``vol`` for one test.
* ``local_dir`` a fresh plain directory on the local disk.
* ``make_volume`` a factory for extra, private volumes (crash tests).

Every mount made here is unmounted at teardown, also when a test failed, and a
watchdog aborts the FUSE connection of a test that hangs longer than
``AIFS_TEST_TIMEOUT`` seconds (default 180) so that a bug in the daemon fails one
test instead of freezing the run.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import explain_buffer_difference  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET = os.environ.get("AIFS_TEST_TARGET", "aifs")
TIMEOUT = float(os.environ.get("AIFS_TEST_TIMEOUT", "180"))
MOUNT_TIMEOUT = 90

CONFIG_TEMPLATE = """\
[volume]
state_dir = "{state_dir}"

[[tiers]]
kind = "ram"
capacity = "256MiB"

[[tiers]]
kind = "nvme"
capacity = "4GiB"

[[tiers]]
kind = "objstore"

# write-only opens under any directory named "cached" go through the page cache
[[rules]]
path = "/**/cached/**"
direct_writes = false
"""

_live_volumes: list["Volume"] = []


def aifs_cli(*args: str, timeout: float = MOUNT_TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``python3 -m aifs ARGS`` from the repository root (exit -1 on timeout)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "aifs", *args]
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(cmd, -1, text(e.stdout),
                                           text(e.stderr) + f"\n(timed out after {timeout}s)")


def _describe(cp: subprocess.CompletedProcess) -> str:
    return f"exit {cp.returncode}\nstdout:\n{cp.stdout[-4000:]}\nstderr:\n{cp.stderr[-4000:]}"


def _mount_dev(path: Path) -> int | None:
    """st_dev of the mount at path, or None. Reads mountinfo only, so it never touches
    a (maybe hung) mount; path must be canonical (Volume resolves it before mounting)."""
    target = str(path)
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == target:
                major, minor = fields[2].split(":")
                dev = os.makedev(int(major), int(minor))  # the last one stacks on top
    return dev


def _holds_descriptors(pid: int) -> bool:
    """Whether any thread of `pid` still has a descriptor open."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # reaped
        return False
    for tid in threads:
        try:
            if os.listdir(f"/proc/{pid}/task/{tid}/fd"):
                return True
        except OSError:  # this thread's descriptor table is gone already
            pass
    return False


def _mounted(path: Path) -> bool:
    return _mount_dev(path) is not None


def _answers(path: Path, timeout: float = 15.0) -> bool:
    """Does the mount answer stat and readdir within timeout? (A hung daemon would
    block the caller forever, so ask from a helper thread.)"""
    result: list[bool] = []

    def probe():
        try:
            os.stat(path)
            os.listdir(path)
            result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(result and result[0])


class Volume:
    """One aifs volume: a config, a state directory and a mountpoint."""

    is_mount = True

    def __init__(self, base: Path, meta_url: str | None = None):
        self.base = base
        self.state_dir = base / "state"
        self.config = base / "aifs.toml"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        meta = f'\n[meta]\nurl = "{meta_url}"\n' if meta_url else ""
        self.config.write_text(CONFIG_TEMPLATE.format(state_dir=self.state_dir) + meta)
        # Outside pytest's 0700 temp tree so that other users can reach the mount.
        self.path = Path(os.path.realpath(tempfile.mkdtemp(prefix="aifs-mnt-")))
        os.chmod(self.path, 0o755)
        self.st_dev: int | None = None
        _live_volumes.append(self)

    # -- mounting ------------------------------------------------------------
    def mount(self) -> None:
        cp = aifs_cli("mount", "-c", str(self.config), "--background", str(self.path))
        if cp.returncode != 0 or not _mounted(self.path):
            self._force_unmount()
            raise RuntimeError(f"aifs mount {self.path} failed: {_describe(cp)}")
        self.st_dev = _mount_dev(self.path)

    def umount(self) -> None:
        cp = aifs_cli("umount", str(self.path))
        if cp.returncode != 0 or _mounted(self.path):
            self._force_unmount()
            raise RuntimeError(f"aifs umount {self.path} failed: {_describe(cp)}")
        self._wait_daemons_gone(timeout=30)
        self.st_dev = None

    def remount(self) -> None:
        self.umount()
        self.mount()

    # -- the daemon ------------------------------------------------------------
    def _is_our_daemon(self, pid: int) -> bool:
        """An `aifs mount` process for this mountpoint or config (never anything else,
        even when a stale pid file names a pid that was reused)."""
        if pid == os.getpid():
            return False
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        argv = raw.decode(errors="replace").split("\0")
        ours = {str(self.path), str(self.config)}
        return (bool(ours & set(argv)) and "aifs" in " ".join(argv) and "mount" in argv
                and "umount" not in argv
                and not os.path.basename(argv[0]).startswith("fusermount"))

    def daemon_pids(self) -> list[int]:
        """Pids of the aifs processes serving this volume: from <state_dir>/aifs.pid
        and from /proc/*/cmdline, each checked against its command line."""
        candidates: set[int] = set()
        try:
            candidates.add(int((self.state_dir / "aifs.pid").read_text().split()[0]))
        except (ValueError, IndexError, OSError):
            pass
        candidates.update(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        return sorted(pid for pid in candidates if self._is_our_daemon(pid))

    def _wait_daemons_gone(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.daemon_pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    @staticmethod
    def _wait_descriptors_closed(pids: list[int], timeout: float) -> None:
        """Until the kernel has closed every descriptor of the killed `pids`. A dying process
        loses its command line (and so stops looking like a daemon) before its descriptors
        close, and its threads keep them open after its first thread has gone: until then its
        sockets still look open to their peers."""
        deadline = time.monotonic() + timeout
        while any(_holds_descriptors(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)

    def kill9(self) -> list[int]:
        """SIGKILL the daemon(s) of this mount, then clear the dead mount."""
        pids = self.daemon_pids()
        if not pids:
            raise RuntimeError(f"no aifs daemon found for {self.path}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._wait_daemons_gone(timeout=30)
        self._wait_descriptors_closed(pids, timeout=30)
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)
        self.st_dev = None
        return pids

    def abort_connection(self) -> None:
        """Fail every pending and future request of this mount (watchdog): abort the
        FUSE connection through fusectl where it is mounted, and kill the daemon
        (its /dev/fuse closing aborts the connection too)."""
        if self.st_dev is not None:
            abort = Path(f"/sys/fs/fuse/connections/{os.minor(self.st_dev)}/abort")
            try:
                abort.write_text("1")
            except OSError:
                pass
        self._force_unmount()

    def healthy(self) -> bool:
        return _mounted(self.path) and _answers(self.path)

    def ensure_mounted(self) -> None:
        """Bring a dead or missing mount back (after a watchdog abort or a crash test)."""
        if self.healthy():
            return
        self._force_unmount()
        self.mount()

    def _force_unmount(self) -> None:
        for pid in self.daemon_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._wait_daemons_gone(timeout=10)
        if _mounted(self.path):
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)
        self.st_dev = None

    def close(self) -> None:
        """Unmount at teardown, whatever state the mount is in."""
        try:
            if _mounted(self.path):
                if self.healthy():
                    try:
                        self.umount()
                    except Exception:  # noqa: BLE001 - fall back to force
                        self._force_unmount()
                else:
                    self._force_unmount()
            else:
                self._force_unmount()
        finally:
            if self in _live_volumes:
                _live_volumes.remove(self)
            try:
                os.rmdir(self.path)
            except OSError:
                pass


class LocalVolume:
    """Stand-in for a Volume on a plain local directory (AIFS_TEST_TARGET=local)."""

    is_mount = False
    st_dev = None

    def __init__(self, base: Path):
        self.base = base
        self.state_dir = base / "state"
        self.config = base / "aifs.toml"
        self.path = Path(tempfile.mkdtemp(prefix="aifs-local-"))
        os.chmod(self.path, 0o755)

    def _skip(self, *_a, **_k):
        pytest.skip("needs a real aifs mount (AIFS_TEST_TARGET=local)")

    mount = umount = remount = kill9 = _skip

    def ensure_mounted(self) -> None:
        pass

    def abort_connection(self) -> None:
        pass

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _cleanup_at_exit() -> None:
    for v in list(_live_volumes):
        try:
            v.close()
        except Exception:  # noqa: BLE001
            pass


atexit.register(_cleanup_at_exit)


def _sigterm_to_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_assertrepr_compare(op, left, right):
    """Large byte buffers that differ are described in a few lines, not a text diff."""
    if op in ("==", "!="):
        return explain_buffer_difference(left, right)
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(seconds): watchdog budget for one test")
    config.addinivalue_line("markers", "needs_mount: test needs a real aifs mount")
    if threading.current_thread() is threading.main_thread():
        # so that teardown (unmount) runs when the run is terminated
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    os.umask(0o022)


def _new_volume(base: Path, meta_url: str | None = None):
    if TARGET == "local":
        return LocalVolume(base)
    v = Volume(base, meta_url)
    v.mount()
    return v


@pytest.fixture(scope="session")
def make_volume(tmp_path_factory):
    """Factory for extra volumes (on a shared engine at `meta_url` if given); all of them
    are closed at session end."""
    made = []

    def make(name: str = "vol", meta_url: str | None = None):
        v = _new_volume(tmp_path_factory.mktemp(name), meta_url)
        made.append(v)
        return v

    yield make
    for v in made:
        v.close()


ENGINES = ("rocksdb", "redis")
EVERY_ENGINE = ("posix", "test_differential.py")  # suites whose tests run once per metadata engine


def pytest_generate_tests(metafunc):
    """Tests of the suites in EVERY_ENGINE that use the volume run on each metadata engine."""
    if "vol" in metafunc.fixturenames and any(part in EVERY_ENGINE for part in metafunc.definition.path.parts):
        metafunc.parametrize("engine", ENGINES, indirect=True, scope="session")


@pytest.fixture(scope="session")
def engine(request):
    """The metadata engine of `vol`: the embedded RocksDB unless a suite runs on every engine."""
    return getattr(request, "param", "rocksdb")


@pytest.fixture(scope="session")
def vol(make_volume, engine, request):
    if engine == "rocksdb" or TARGET == "local":
        return make_volume("main")
    return make_volume("on-redis", meta_url=request.getfixturevalue("redis_engine").url)


@pytest.fixture(scope="session")
def redis_engine(tmp_path_factory):
    """A redis-server for volumes whose metadata lives in Redis."""
    from redisserver import running

    with running(tmp_path_factory.mktemp("redis-engine")) as server:
        yield server


_counter = itertools.count()


@pytest.fixture
def watchdog(request):
    """Abort the FUSE connection(s) if this test runs past its time budget."""
    marker = request.node.get_closest_marker("timeout_s")
    budget = float(marker.args[0]) if marker else TIMEOUT
    fired = []
    vols = [v for v in _live_volumes]

    def fire():
        fired.append(True)
        sys.stderr.write(f"\nWATCHDOG: {request.node.nodeid} exceeded {budget}s; "
                         "aborting FUSE connections\n")
        for v in vols:
            v.abort_connection()

    timer = threading.Timer(budget, fire)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
    if fired:
        pytest.fail(f"test hung for more than {budget}s; FUSE connection aborted")


@pytest.fixture
def d(vol, request, watchdog):
    """A fresh, empty directory on the volume under test."""
    vol.ensure_mounted()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    p = vol.path / f"{next(_counter):04d}-{name}"
    os.mkdir(p)
    os.chmod(p, 0o755)
    return p


@pytest.fixture
def local_dir(tmp_path):
    p = tmp_path / "local"
    p.mkdir()
    return p


@pytest.fixture
def mounted(vol):
    """The volume, skipping the test when it is not a real mount."""
    if not vol.is_mount:
        pytest.skip("needs a real aifs mount (AIFS_TEST_TARGET=local)")
    return vol
