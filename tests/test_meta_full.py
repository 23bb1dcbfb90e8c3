"""A full metadata disk never kills the mount.

The state directory (and so the metadata) sits on a small tmpfs; the NVMe tier, the
object store and the log live elsewhere. Filling the tmpfs turns metadata changes into
ENOSPC while the mount stays up and serves reads; freeing it brings writes and uploads
back without a remount, and nothing acknowledged is lost.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TARGET, Volume, aifs_cli
from helpers import LOCAL_TIERS
from smallfs import SmallFs, small_fs_at

pytestmark = [pytest.mark.skipif(TARGET == "local", reason="needs a real aifs mount"), pytest.mark.timeout_s(300)]

ATTEMPTS = 2000  # creates a full tmpfs takes at most before the metadata refuses one
WAIT_S = 60.0
STATE_XATTR = "user.aifs.state"
BS = 64 << 10
PACED = 2 << 20  # uploads are paced, so this file's last ones finish long after the disk filled

CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "64KiB"

[writeback]
upload_bandwidth = "256KiB"

[logging]
file = "{log}"

""" + LOCAL_TIERS + """path = "{nvme}"

[[tiers]]
kind = "objstore"
path = "{objects}"
"""


@dataclass
class Setup:
    vol: Volume
    small: SmallFs  # holds the state directory
    log: Path
    objects: Path  # the object store: one file per uploaded block


@pytest.fixture
def setup(tmp_path):
    """A mounted volume whose state directory is on an 8 MiB tmpfs."""
    for name in ("nvme", "objects"):
        (tmp_path / name).mkdir()
    with small_fs_at(tmp_path / "small") as small:
        vol = Volume(tmp_path / "vol")
        vol.state_dir = small.path / "state"
        log = tmp_path / "aifs.log"
        vol.config.write_text(CONFIG.format(state_dir=vol.state_dir, log=log,
                                            nvme=tmp_path / "nvme", objects=tmp_path / "objects"))
        try:
            vol.mount()
            yield Setup(vol, small, log, tmp_path / "objects")
        finally:
            vol.close()


def content(seed: int, size: int) -> bytes:
    return (seed.to_bytes(4, "big") * (size // 4 + 1))[:size]


def write_file(path: Path, data: bytes, fsync: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def write_until_refused(directory: Path) -> tuple[dict[Path, bytes], OSError]:
    """Create and write files until one fails; the ones whose close succeeded are acknowledged."""
    acked = {}
    for i in range(ATTEMPTS):
        path, data = directory / f"late-{i}", content(1000 + i, 3000)
        try:
            write_file(path, data)
        except OSError as e:
            return acked, e
        acked[path] = data
    raise AssertionError(f"{ATTEMPTS} files written on a full metadata disk")


def wait_uploaded(paths) -> None:
    deadline = time.monotonic() + WAIT_S
    for path in paths:
        while json.loads(os.getxattr(path, STATE_XATTR))["state"] != "uploaded":
            assert time.monotonic() < deadline, f"{path} not uploaded within {WAIT_S:.0f} s"
            time.sleep(0.1)


def wait_objects(objects: Path, count: int) -> None:
    """Until the object store holds `count` blocks."""
    deadline = time.monotonic() + WAIT_S
    while len(list(objects.glob("??/*"))) < count:
        assert time.monotonic() < deadline, f"fewer than {count} blocks uploaded within {WAIT_S:.0f} s"
        time.sleep(0.1)


def states(paths) -> set[str]:
    return {json.loads(os.getxattr(path, STATE_XATTR))["state"] for path in paths}


def log_lines(log: Path, text: str) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if text in line]


def check_serving_read_only(setup: Setup, pid: int, acked: dict[Path, bytes], synced: Path) -> None:
    """The mount lives and reads; every change fails with ENOSPC; fsync of what was committed
    before works; uploads go on, but none is recorded; one log line says why."""
    vol = setup.vol
    os.kill(pid, 0)
    assert os.stat(vol.path).st_dev == vol.st_dev, "the mountpoint is still the aifs mount"
    for path, data in acked.items():
        assert path.read_bytes() == data
    for change in (lambda: os.mkdir(vol.path / "dir"), lambda: os.rename(synced, vol.path / "moved"),
                   lambda: os.chmod(synced, 0o600), lambda: os.unlink(vol.path / "early-1")):
        with pytest.raises(OSError) as refused:
            change()
        assert refused.value.errno == errno.ENOSPC
    fd = os.open(synced, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    wait_objects(setup.objects, sum(-(-len(data) // BS) for data in acked.values()))
    assert "pending" in states(acked), "uploads went on, but none is recorded as done"
    os.kill(pid, 0)
    assert len(log_lines(setup.log, "read-only until space is freed")) == 1


def test_a_full_metadata_disk_fails_changes_with_enospc_and_the_mount_recovers(setup, watchdog):
    vol = setup.vol
    sizes = (PACED, 0, 100, 65536, 200_000)
    acked = {vol.path / f"early-{i}": content(i, size) for i, size in enumerate(sizes)}
    for path, data in acked.items():
        write_file(path, data)
    synced = vol.path / "synced"
    acked[synced] = content(99, 150_000)
    write_file(synced, acked[synced], fsync=True)
    (pid,) = vol.daemon_pids()

    setup.small.fill()
    late, refusal = write_until_refused(vol.path)
    assert refusal.errno == errno.ENOSPC, refusal
    acked.update(late)
    check_serving_read_only(setup, pid, acked, synced)

    setup.small.free()
    again = vol.path / "after"
    acked[again] = content(7, 300_000)
    write_file(again, acked[again])
    os.mkdir(vol.path / "dir")
    assert again.read_bytes() == acked[again]
    wait_uploaded(acked)
    assert len(log_lines(setup.log, "writable again")) == 1
    os.kill(pid, 0)

    vol.umount()
    cp = aifs_cli("fsck", "-c", str(vol.config))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    vol.mount()
    for path, data in acked.items():
        assert path.read_bytes() == data
