"""One S3 volume for all the sample-order prefetch tests: a small dataset written once and uploaded,
then mounted anew with the local tiers wiped for each test, so that every file is only in the
bucket when the test starts. Each file begins with its index, so a sample says which it is."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from s3.conftest import moto_server  # noqa: F401 - the fixture
from s3.helpers_mount import S3Setup, S3Volume, _table, sync_wait, wait_for

from aifs.control.client import ControlClient

FILES = 200
KiB = 1 << 10
FILE_BYTES = 64 * KiB


class PrefetchVolume(S3Volume):
    """An S3 volume whose config has a [prefetch] table of the test's choosing."""

    prefetch: dict[str, Any] = {}

    def write_config(self) -> None:
        self.config.write_text(self.setup.render(self.state_dir) + _table("[prefetch]", self.prefetch))

    def cold(self, **prefetch: Any) -> None:
        """Mount anew with these [prefetch] keys and nothing in RAM or NVMe: reads start in S3."""
        self.umount()
        self.prefetch = prefetch
        self.write_config()
        self.wipe_local()
        self.mount()

    def control(self, op: str, **args: Any) -> Any:
        return ControlClient(self.state_dir, timeout=30).call(op, **args)

    def counts(self) -> dict[str, int]:
        return self.control("prefetch_status")["counts"]

    def tier_hits(self) -> dict[str, int]:
        return {name: tier["hits"] for name, tier in self.control("stats")["tiers"].items()}

    def settled(self) -> dict[str, int]:
        """The counters once no prefetch is under way."""
        return wait_for(lambda: (counts := self.counts())["in_flight"] == 0 and counts, "prefetches to finish")


@dataclass
class Dataset:
    volume: PrefetchVolume
    paths: list[Path]
    source: list[bytes]

    def index_of(self, sample: bytes) -> int:
        return int.from_bytes(sample[:8], "big")


@pytest.fixture(scope="package")
def dataset(moto_server, tmp_path_factory) -> Iterator[Dataset]:  # noqa: F811
    """FILES files of FILE_BYTES under train/, in the bucket; the volume is mounted."""
    volume = PrefetchVolume(tmp_path_factory.mktemp("prefetch"), S3Setup(moto_server.endpoint,
                                                                        moto_server.create_bucket()))
    volume.mount()
    try:
        rng = random.Random(11)
        (volume.path / "train").mkdir()
        paths = [volume.path / "train" / f"sample{i:04d}.bin" for i in range(FILES)]
        source = [i.to_bytes(8, "big") + rng.randbytes(FILE_BYTES - 8) for i in range(FILES)]
        for path, data in zip(paths, source):
            path.write_bytes(data)
        sync_wait(volume.path)
        yield Dataset(volume, paths, source)
    finally:
        volume.close()


def touch(path: Path) -> None:
    """Open and close the file without reading it: a reader reaching it, with nothing fetched."""
    os.close(os.open(path, os.O_RDONLY))
