"""One flipped byte in an NVMe record header must not cost the blocks behind it.

Three files are written and fsynced while S3 is frozen (their blocks exist on NVMe only),
the mount is killed, and one byte of the first record's header is overwritten. Then:

* `aifs fsck` without --repair names the damaged record (file, object, segment file and
  offset) and changes no byte under the state directory;
* `aifs fsck --repair` rewrites the header, and the remounted files read back identical;
* a copy of the same damaged volume, simply mounted again, recovers the record by itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import aifs_cli
from helpers import tree_digest

from .helpers_mount import MiB, assert_digests, make_s3_volume, write_random

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

FILES = 3
FILE_SIZE = 8 * MiB


def killed_before_upload(volume, moto, sizes: dict[str, int]) -> dict[str, str]:
    """Write and fsync files while S3 is frozen, so their blocks exist on NVMe only, then kill
    the mount; their digests."""
    volume.mount()
    moto.freeze()
    try:
        digests = {name: write_random(volume.path / name, size, fsync=True) for name, size in sizes.items()}
        volume.kill9()
    finally:
        moto.thaw()
    return digests


def fsck(volume, *args: str) -> tuple[int, list[dict]]:
    cp = aifs_cli("fsck", "-c", str(volume.config), "--json", *args, timeout=120)
    assert cp.returncode in (0, 1), f"fsck could not run (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}"
    lines = [json.loads(line) for line in cp.stdout.splitlines()]
    return cp.returncode, [line for line in lines if "summary" not in line]


def flip_first_header(state_dir: Path) -> Path:
    first = sorted((state_dir / "nvme").glob("seg-*.log"))[0]
    with open(first, "r+b") as f:
        magic = f.read(1)
        f.seek(0)
        f.write(bytes([magic[0] ^ 0xFF]))
    return first


@pytest.mark.timeout_s(180)
def test_a_damaged_header_is_named_by_fsck_and_recovered(make_s3_volume, private_moto):
    bucket = private_moto.create_bucket()
    volume = make_s3_volume(private_moto.endpoint, bucket)
    digests = killed_before_upload(volume, private_moto, {f"f{i}": FILE_SIZE for i in range(FILES)})
    segment = flip_first_header(volume.state_dir)
    twin = make_s3_volume(private_moto.endpoint, bucket)
    shutil.copytree(volume.state_dir, twin.state_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))

    before = tree_digest(volume.state_dir)
    code, findings = fsck(volume)
    assert tree_digest(volume.state_dir) == before, "fsck without --repair changed the state directory"
    assert code == 1 and [(f["kind"], f["fix"], f["repaired"]) for f in findings] == [
        ("damaged-record", "rewrite its header", False)], findings
    subject = findings[0]["subject"]
    assert subject.startswith(f"/f0 bytes [0, {MiB})") and f"object {findings[0]['block']:016x}" in subject
    assert subject.endswith(f"record in {segment} at offset 0"), subject

    code, findings = fsck(volume, "--repair")
    assert code == 0 and [(f["kind"], f["repaired"]) for f in findings] == [("damaged-record", True)], findings
    assert fsck(volume) == (0, [])
    volume.mount()
    assert_digests(volume.path, digests)

    twin.mount()
    assert_digests(twin.path, digests)
    assert "recovered block" in twin.log_text()
    twin.umount()
    assert fsck(twin) == (0, []), "the mount left the damaged header as it was"


@pytest.mark.timeout_s(120)
def test_fsck_names_the_tiers_a_lost_block_is_missing_from(make_s3_volume, private_moto):
    bucket = private_moto.create_bucket()
    volume = make_s3_volume(private_moto.endpoint, bucket)
    killed_before_upload(volume, private_moto, {"lost": MiB})
    shutil.rmtree(volume.state_dir / "nvme")
    code, findings = fsck(volume)
    assert code == 1 and [f["kind"] for f in findings] == ["missing-block"], findings
    assert findings[0]["meaning"].startswith("its object is in no tier (nvme, s3)"), findings[0]
