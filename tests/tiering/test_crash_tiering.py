"""kill -9 of the mount while the tier manager moves blocks between tiers.

Two moments where the NVMe tier is being rewritten fastest: `aifs warmup` filling it
from the bottom tier, and eviction churning it (small RAM and NVMe budgets, data
larger than both read and written at once). After each crash the volume is mounted
again and must show (docs/architecture.md):

* every file closed before the kill reads back byte-identical; a corrupt cache entry
  would fail its checksum and surface as EIO, so any OSError fails the test;
* the NVMe tier's index was rebuilt from its segments (used bytes > 0, within budget,
  straight after the mount, before any read could have filled it again);
* `aifs fsck` on the unmounted volume finds nothing.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from helpers import pattern
from tests.tiering.conftest import MiB, TieredVolume, aifs_cli, read_uncached

NVME = 64 * MiB
WARMUP_FILES = 64
WARMUP_FILE_SIZE = MiB + 4321  # two blocks each, the second one short
BIG_FILES = 2
BIG_FILE_SIZE = 40 * MiB  # together larger than the NVMe budget
CHURN_FILE_SIZE = 3 * MiB + 17


def sha(data: bytes) -> str:
    """Digests, not bytes, are kept: the expected content of ~100 MiB stays small."""
    return hashlib.sha256(data).hexdigest()


def write_files(paths: list[Path], size: int) -> dict[Path, str]:
    """Write distinct content to each path (close, no fsync); returns path -> sha256."""
    digests = {}
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = pattern(path.name, size)
        path.write_bytes(data)
        digests[path] = sha(data)
    return digests


def shrink_nvme(volume: TieredVolume, capacity: int) -> None:
    """Remount the (still empty) volume with a small NVMe budget, so eviction is cheap to reach."""
    volume.umount()
    config = volume.config.read_text()
    shrunk = config.replace('capacity = "1GiB"', f'capacity = "{capacity}"', 1)
    assert shrunk != config, "the tiering conftest's NVMe line changed"
    volume.config.write_text(shrunk)
    volume.mount()


def segment_bytes(volume: TieredVolume) -> int:
    """Size of the NVMe segment files, read off the local disk (no call into the mount).

    Evicted records are hole-punched but the files keep their size, so this counts
    every byte ever appended: above the budget means blocks were evicted.
    """
    return sum(p.stat().st_size for p in (volume.state_dir / "nvme").glob("seg-*.log"))


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    """Poll tightly: the kill must land while the work is still under way."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def upload_all(volume: TieredVolume) -> None:
    """Push every dirty block to the bottom tier, so NVMe holds only evictable clean blocks."""
    cp = aifs_cli("sync", "--wait", str(volume.path))
    assert cp.returncode == 0, cp.stderr


def assert_recovered(volume: TieredVolume, files: dict[Path, str]) -> None:
    """After the crash and a fresh mount: the NVMe index is back, data intact, fsck clean."""
    nvme = volume.status()["tiers"]["nvme"]
    assert 0 < nvme["used"] <= nvme["capacity"], f"NVMe index not rebuilt from its segments: {nvme}"
    errors, wrong = [], []
    for path, digest in files.items():
        try:
            if sha(read_uncached(path)) != digest:
                wrong.append(path.name)
        except OSError as e:  # EIO here is a cache entry that failed its checksum
            errors.append(f"{path.name}: {e}")
    assert not errors, f"reads failed after the crash: {errors}"
    assert not wrong, f"files differ from what was written before the crash: {wrong}"
    volume.umount()
    cp = aifs_cli("fsck", "-c", str(volume.config), timeout=120)
    assert cp.returncode == 0, f"fsck after the crash (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}"


@pytest.mark.timeout_s(120)
def test_kill9_during_warmup(tiered):
    volume = tiered(ram="16MiB")
    dataset = volume.path / "dataset"
    files = write_files([dataset / f"shard{i % 4}" / f"s{i:03d}.bin" for i in range(WARMUP_FILES)],
                        WARMUP_FILE_SIZE)
    volume.make_cold()
    assert segment_bytes(volume) == 0

    done: list = []
    warmup = threading.Thread(target=lambda: done.append(
        aifs_cli("warmup", "--tier", "nvme", "--jobs", "2", str(dataset))))
    warmup.start()
    # Kill once a few blocks have landed, well before the whole tree has.
    wait_for(lambda: segment_bytes(volume) >= 4 * MiB or not warmup.is_alive(), "warmup to start")
    assert warmup.is_alive(), f"warmup finished before the kill: {done}"
    volume.kill9()
    warmup.join(60)
    assert done and done[0].returncode != 0, "warmup did not notice its mount dying"
    assert segment_bytes(volume) < len(files) * WARMUP_FILE_SIZE, "warmup had finished"

    volume.mount()
    assert_recovered(volume, files)


def churn(volume_path: str, big: list[str], log_path: str) -> None:
    """Child process: read the big files over and over (each pass evicts clean NVMe and
    RAM blocks) while writing new files; after each close, log "name sha256"."""
    with open(log_path, "a", buffering=1) as log:
        try:
            for n in range(10_000):
                for path in big:
                    read_uncached(Path(path))
                path = Path(volume_path, "churn", f"c{n:04d}.bin")
                data = pattern(path.name, CHURN_FILE_SIZE)
                path.write_bytes(data)
                log.write(f"{path} {sha(data)}\n")
        except OSError:
            pass  # the mount went away under us: expected


def closed_files(log_path: Path) -> dict[Path, str]:
    """The churn files whose close returned before the kill (a torn last line is skipped)."""
    entries = [line.split() for line in log_path.read_text().splitlines()]
    return {Path(entry[0]): entry[1] for entry in entries if len(entry) == 2 and len(entry[1]) == 64}


@pytest.mark.timeout_s(120)
def test_kill9_during_eviction(tiered, tmp_path):
    volume = tiered(ram="16MiB")
    shrink_nvme(volume, NVME)
    big = write_files([volume.path / f"big{i}.bin" for i in range(BIG_FILES)], BIG_FILE_SIZE)
    upload_all(volume)
    (volume.path / "churn").mkdir()

    log_path = tmp_path / "churn.log"
    log_path.touch()
    child = multiprocessing.get_context("fork").Process(
        target=churn, args=(str(volume.path), [str(p) for p in big], str(log_path)))
    child.start()
    try:
        wait_for(lambda: len(closed_files(log_path)) >= 2, "the churn to write two files", timeout=60)
        assert segment_bytes(volume) > NVME, "nothing was evicted from NVMe before the kill"
        volume.kill9()
        child.join(30)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    written = closed_files(log_path)

    volume.mount()
    assert_recovered(volume, {**big, **written})
