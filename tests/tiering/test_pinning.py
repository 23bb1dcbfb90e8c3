"""Pinned files stay in their tier: under a scan larger than RAM, across a restart, by rule."""

from __future__ import annotations

import os
import time

from tests.tiering.conftest import MiB, read_uncached, aifs_cli

RESTORE_WAIT_S = 60


def write(path, nbytes: int) -> bytes:
    data = os.urandom(nbytes)
    path.write_bytes(data)
    return data


def scan_more_than_ram(files) -> None:
    """Read every MiB of `files` once, last first: no stream for readahead to follow, whose
    blocks would leave RAM as soon as read, so each block read takes its room in RAM."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for offset in reversed(range(0, os.fstat(fd).st_size, MiB)):
                os.pread(fd, MiB, offset)
        finally:
            os.close(fd)


def wait_resident(volume, tier: str, nbytes: int) -> dict:
    """Pins are reloaded in the background after a mount: wait until they are all back."""
    deadline = time.monotonic() + RESTORE_WAIT_S
    while True:
        pinned = volume.status()["pinned"][tier]
        if pinned["resident"] >= nbytes or time.monotonic() > deadline:
            return pinned
        time.sleep(0.1)


def assert_only_ram_serves(volume, path, expected: bytes) -> None:
    before = volume.hits()
    assert read_uncached(path) == expected
    after = volume.hits()
    delta = {t: after[t] - before[t] for t in after}
    assert delta["ram"] >= len(expected) // MiB, delta
    assert {t: n for t, n in delta.items() if t != "ram"} == {t: 0 for t in delta if t != "ram"}, delta


def test_pinned_file_reads_never_leave_ram(tiered):
    volume = tiered(ram="16MiB")
    weights = volume.path / "weights.bin"
    expected = write(weights, 4 * MiB)
    others = [volume.path / f"data{i}.bin" for i in range(2)]
    for path in others:
        write(path, 12 * MiB)

    cp = aifs_cli("pin", "--tier", "ram", str(weights))
    assert cp.returncode == 0, cp.stderr
    assert "1 files pinned to ram" in cp.stdout
    scan_more_than_ram(others)  # 24 MiB through a 16 MiB RAM tier

    pinned = volume.status()["pinned"]["ram"]
    assert pinned == {"files": 1, "bytes": 4 * MiB, "resident": 4 * MiB}
    assert_only_ram_serves(volume, weights, expected)

    volume.remount()  # pins persist; their blocks come back in the background
    assert wait_resident(volume, "ram", 4 * MiB) == {"files": 1, "bytes": 4 * MiB, "resident": 4 * MiB}
    scan_more_than_ram(others)
    assert_only_ram_serves(volume, weights, expected)

    cp = aifs_cli("unpin", str(weights))
    assert cp.returncode == 0, cp.stderr
    assert volume.status()["pinned"]["ram"] == {"files": 0, "bytes": 0, "resident": 0}
    scan_more_than_ram(others)
    before = volume.hits()
    assert read_uncached(weights) == expected
    after = volume.hits()
    assert after["nvme"] > before["nvme"]  # unpinned, it was evicted like any block


def test_pinning_more_than_the_tier_holds_fails_clearly(tiered):
    volume = tiered(ram="16MiB")
    small, big = volume.path / "small.bin", volume.path / "big.bin"
    write(small, 10 * MiB)
    write(big, 8 * MiB)
    assert aifs_cli("pin", "--tier", "ram", str(small)).returncode == 0
    cp = aifs_cli("pin", "--tier", "ram", str(big))
    assert cp.returncode != 0
    assert "needs 8.0 MiB in the ram tier" in cp.stderr
    assert "only 6.0 MiB is available" in cp.stderr
    assert volume.status()["pinned"]["ram"]["files"] == 1


def test_pin_to_nvme_survives_restart(tiered):
    volume = tiered()
    path = volume.path / "index.bin"
    expected = write(path, 3 * MiB)
    cp = aifs_cli("pin", "--tier", "nvme", str(path))
    assert cp.returncode == 0, cp.stderr
    volume.remount()
    assert volume.status()["pinned"]["nvme"] == {"files": 1, "bytes": 3 * MiB, "resident": 3 * MiB}
    assert read_uncached(path) == expected


def test_rule_pins_files_when_created(tiered):
    volume = tiered(extra='\n[[rules]]\npath = "/models/**"\npin = "ram"\n')
    (volume.path / "models").mkdir()
    expected = write(volume.path / "models" / "w.bin", 3 * MiB)
    write(volume.path / "other.bin", 20 * MiB)
    status = volume.status()
    assert status["pinned"]["ram"] == {"files": 1, "bytes": 3 * MiB, "resident": 3 * MiB}, status
    scan_more_than_ram([volume.path / "other.bin"])
    assert_only_ram_serves(volume, volume.path / "models" / "w.bin", expected)
