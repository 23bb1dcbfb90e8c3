"""End to end through FUSE with an S3 bucket as the durable bottom tier: what was written
comes back byte for byte from the bucket alone once the local NVMe tier is gone."""

import os
import shutil

import pytest
from conftest import Volume  # tests/conftest.py: mount, umount and cleanup of one volume
from helpers import LOCAL_TIERS

from aifs.config.models import PiB
from aifs.tiers.s3 import S3Tier

from .conftest import ACCESS_KEY, SECRET_KEY, MotoServer, new_volume, s3_settings
from .helpers_mount import sync_wait

BLOCK = 1 << 20  # blocks stay under 5 MiB: moto may corrupt larger ones listed mid-upload
PREFIX = "volumes/e2e/"

CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "1MiB"

""" + LOCAL_TIERS + """
[[tiers]]
kind = "s3"
endpoint = "{endpoint}"
bucket = "{bucket}"
prefix = "{prefix}"
access_key = "{access_key}"
secret_key = "{secret_key}"
"""


def s3_volume(base, server: MotoServer, bucket: str) -> Volume:
    """A mountable volume whose config puts the s3 tier at the bottom."""
    volume = Volume(base)
    volume.config.write_text(CONFIG.format(
        state_dir=volume.state_dir, endpoint=server.endpoint, bucket=bucket, prefix=PREFIX,
        access_key=ACCESS_KEY, secret_key=SECRET_KEY,
    ))
    return volume


@pytest.fixture
def volume(tmp_path, moto_server, bucket):
    volume = s3_volume(tmp_path, moto_server, bucket)
    yield volume
    volume.close()


def test_files_come_back_from_s3_after_the_nvme_tier_is_wiped(volume, moto_server, bucket):
    files = {
        "empty": b"",
        "small.txt": b"hello s3\n",
        "one-block.bin": os.urandom(BLOCK),
        "dir/sub/multi.bin": os.urandom(3 * BLOCK + 12345),
        "dir/tail.bin": os.urandom(200_000),
    }
    volume.mount()
    os.makedirs(volume.path / "dir/sub")
    for name, data in files.items():
        (volume.path / name).write_bytes(data)
    sync_wait(volume.path)  # small blocks are packed: the bucket holds fewer objects than blocks
    volume.umount()

    shutil.rmtree(volume.state_dir / "nvme")
    volume.mount()
    for name, data in files.items():
        assert (volume.path / name).read_bytes() == data, name
    st = os.statvfs(volume.path)
    assert st.f_blocks * st.f_frsize == PiB and 0 < st.f_bavail * st.f_frsize <= PiB


def test_mount_is_refused_when_the_prefix_belongs_to_another_volume(volume, moto_server, bucket):
    other = new_volume()
    S3Tier(s3_settings(moto_server, bucket, prefix=PREFIX), PiB, other)
    with pytest.raises(RuntimeError) as info:
        volume.mount()
    assert "belongs to another aifs volume" in str(info.value)
    assert other.uuid in str(info.value)
