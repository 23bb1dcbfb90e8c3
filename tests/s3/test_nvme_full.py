"""An NVMe tier whose file system is smaller than its configured capacity, and fills up.

The tier lives on a small tmpfs (with a ballast file beside it, put there after the mount,
so the disk fills before the tier's own count says so). With S3 frozen nothing can leave
staging: writers get ENOSPC once the disk is full. Once S3 answers and the backlog has
drained, new writes succeed again without a remount (clean blocks are evicted to make
room), and after a remount too; every file whose fsync and close succeeded reads back.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from smallfs import small_fs_at

from .helpers_mount import MiB, assert_digests, make_s3_volume, sync_wait, write_random

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

DISK = "24m"
BALLAST = 6 * MiB
FILE_SIZE = 4 * MiB
MOST_FILES = 16  # together far more than the disk holds
S3_KEYS = {"connect_timeout": 1.0, "read_timeout": 2.0, "retries": 2,
           "breaker_failures": 3, "breaker_cooldown": 1.0}


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs of DISK bytes, unmounted at teardown (after the volumes on it: set up first)."""
    with small_fs_at(tmp_path / "disk", DISK) as disk:
        yield disk.path


def write_file(path: Path, size: int) -> str | None:
    """Write, fsync and close a file of random bytes: its digest, or None on ENOSPC (the file
    is removed then). Any other error fails the test."""
    try:
        return write_random(path, size, fsync=True)
    except OSError as e:
        assert e.errno == errno.ENOSPC, f"writing {path.name} failed with {e!r}, not ENOSPC"
        path.unlink(missing_ok=True)
        return None


@pytest.mark.timeout_s(240)
def test_a_full_nvme_disk_is_recovered_from(small_disk, make_s3_volume, private_moto):
    bucket = private_moto.create_bucket()
    (small_disk / "nvme").mkdir()
    volume = make_s3_volume(private_moto.endpoint, bucket, nvme="1GiB", nvme_path=str(small_disk / "nvme"),
                            s3=S3_KEYS, writeback={"dirty_wait": 1.0})
    volume.mount()
    assert "capacity is 1073741824 bytes in the config, but its file system has room for only" in volume.log_text()
    (small_disk / "ballast").write_bytes(os.urandom(BALLAST))

    digests: dict[str, str] = {}
    private_moto.freeze()
    try:
        for i in range(MOST_FILES):
            digest = write_file(volume.path / f"full{i}", FILE_SIZE)
            if digest is None:
                break
            digests[f"full{i}"] = digest
        else:
            pytest.fail(f"{MOST_FILES * FILE_SIZE // MiB} MiB fitted on a {DISK // MiB} MiB disk with S3 frozen")
    finally:
        private_moto.thaw()
    assert digests, "not even one file fitted"

    sync_wait(volume.path)
    for name in ("after0", "after1", "after2"):
        digest = write_file(volume.path / name, FILE_SIZE)
        assert digest is not None, f"{name}: still ENOSPC after the uploads drained"
        digests[name] = digest
    volume.remount()
    for name in ("remounted0", "remounted1"):
        sync_wait(volume.path)
        digest = write_file(volume.path / name, FILE_SIZE)
        assert digest is not None, f"{name}: ENOSPC after a remount"
        digests[name] = digest
    assert_digests(volume.path, digests)
