"""Small private volumes for the tiering tests, and helpers that read the mount's counters.

The RAM tier is kept small (16 MiB of 1 MiB blocks) so that "more data than RAM"
costs tens of megabytes, not gigabytes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import TARGET, Volume, aifs_cli  # tests/conftest.py

MiB = 1 << 20
BASE_CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "1MiB"

[[tiers]]
kind = "ram"
capacity = "{ram}"

[[tiers]]
kind = "nvme"
capacity = "{nvme}"

[[tiers]]
kind = "objstore"
"""


class TieredVolume(Volume):
    """A mounted volume with a small RAM tier and optional extra config (rules, ...)."""

    def __init__(self, base: Path, ram: str = "16MiB", extra: str = "", nvme: str = "1GiB") -> None:
        super().__init__(base)
        self.config.write_text(BASE_CONFIG.format(state_dir=self.state_dir, ram=ram, nvme=nvme) + extra)

    def status(self) -> dict:
        cp = aifs_cli("status", "--json", str(self.path))
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)

    def hits(self) -> dict[str, int]:
        return {name: tier["hits"] for name, tier in self.status()["tiers"].items()}

    def make_cold(self) -> None:
        """Leave the data only in the bottom tier: upload, unmount, drop the NVMe cache, remount."""
        cp = aifs_cli("sync", "--wait", str(self.path))
        assert cp.returncode == 0, cp.stderr
        self.umount()
        shutil.rmtree(self.state_dir / "nvme")
        self.mount()


def read_uncached(path: Path) -> bytes:
    """Read a whole file with its page cache dropped first, so every byte is a FUSE read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@pytest.fixture
def tiered(tmp_path_factory, watchdog):
    """Factory: tiered(ram="16MiB", extra="...", nvme="1GiB") -> a mounted TieredVolume, closed after the test."""
    if TARGET == "local":
        pytest.skip("needs a real aifs mount (AIFS_TEST_TARGET=local)")
    made: list[TieredVolume] = []

    def make(ram: str = "16MiB", extra: str = "", nvme: str = "1GiB") -> TieredVolume:
        volume = TieredVolume(tmp_path_factory.mktemp("tiered"), ram, extra, nvme)
        made.append(volume)
        volume.mount()
        return volume

    yield make
    for volume in made:
        volume.close()
