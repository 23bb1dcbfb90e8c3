"""Files only in S3 (the local tiers wiped) are read through the mount, which fetches them onto
this node's NVMe; from then on they are read without FUSE. The bytes are the same either way."""

from __future__ import annotations

import random

from s3.conftest import bucket, moto_server  # noqa: F401 - the fixtures
from s3.helpers_mount import make_s3_volume, sync_wait

from aifs.client import Client

from .conftest import BLOCK, KiB

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it
FILES = 24


def test_files_only_in_s3_fall_back_then_are_served_locally(make_s3_volume, moto_server, bucket):  # noqa: F811
    volume = make_s3_volume(moto_server.endpoint, bucket, block_size=BLOCK)
    volume.mount()
    rng = random.Random(9)
    paths = [volume.path / f"sample{i:02d}" for i in range(FILES)]
    expected = [rng.randbytes(rng.randrange(1 * KiB, 3 * BLOCK)) for _ in paths]
    for path, data in zip(paths, expected):
        path.write_bytes(data)
    sync_wait(volume.path)
    volume.reload_from_s3()

    client = Client()
    assert client.read_many(paths) == expected
    assert (client.counts.bypass, client.counts.mount) == (0, FILES)  # not on this node: through the mount
    assert client.read_many(paths) == expected
    assert (client.counts.bypass, client.counts.mount) == (FILES, FILES)  # now from this node's NVMe
