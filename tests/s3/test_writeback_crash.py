"""What write-back promises about the bucket.

* kill -9 of the mount while a backlog of a few hundred MiB is uploading loses nothing: the
  remount resumes the queued uploads, and once `aifs sync --wait` returns, the bucket alone
  (NVMe wiped, RAM gone with the process) holds every byte that was written.
* Under a `durability = "remote"` rule, close() and fsync() return only once the bucket holds
  the file's bytes; elsewhere they return at once and the upload runs behind.
"""

import os

import pytest

from .helpers_mount import (
    MiB, aifs_ok, assert_digests, block_objects, file_state, make_s3_volume, poll_status,
    sync_wait, wait_for, write_random,
)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

FILES = 5
FILE_SIZE = 48 * MiB  # 240 MiB of backlog
BLOCK = 512 << 10
CAP = "24MiB"  # the backlog takes 10 s to drain, so the kill lands in the middle


def uploads_under_way(volume) -> dict | None:
    """The status once the uploader has recorded a first batch as done (or, should batches
    grow, sent 3/5 of the bytes): the kill then finds U keys cleared, uploads in flight and
    more queued."""
    report = poll_status(volume)
    if report["uploaded_blocks"] > 0 or report["uploaded_bytes"] >= FILES * FILE_SIZE * 3 // 5:
        return report
    return None


@pytest.mark.timeout_s(150)
def test_kill9_mid_upload_then_resume_and_read_back_from_s3_alone(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, block_size=BLOCK,
                            writeback={"upload_bandwidth": CAP})
    volume.mount()
    (volume.path / "ckpt").mkdir()
    names = [f"ckpt/rank{rank}.pt" for rank in range(FILES)]
    digests = {name: write_random(volume.path / name, FILE_SIZE) for name in names}

    at_kill = wait_for(lambda: uploads_under_way(volume), "uploads to get under way")
    assert at_kill["pending_blocks"] > 0, f"the backlog drained before the kill: {at_kill}"
    volume.kill9()
    print(f"killed with {at_kill['pending_blocks']} blocks ({at_kill['pending_bytes'] / MiB:.0f} MiB) "
          f"queued, {at_kill['uploaded_blocks']} recorded as uploaded, "
          f"{at_kill['uploaded_bytes'] / MiB:.1f} MiB sent")

    volume.setup.writeback = {}  # the remount drains at full speed
    volume.write_config()
    volume.mount()
    print(sync_wait(volume.path).strip())
    assert poll_status(volume)["pending_blocks"] == 0

    volume.reload_from_s3()
    assert_digests(volume.path, digests)
    volume.umount()
    print(aifs_ok("fsck", "-c", str(volume.config)).strip())


def blocks_of(data: bytes, size: int = MiB) -> set[bytes]:
    return {data[i:i + size] for i in range(0, len(data), size)}


@pytest.mark.timeout_s(90)
def test_remote_rule_returns_after_s3_holds_the_bytes(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"upload_bandwidth": "8MiB"},
                            rules=[{"path": "/ckpt/**", "durability": "remote"}])
    volume.mount()
    client = moto_server.client()
    for folder in ("ckpt", "scratch"):
        (volume.path / folder).mkdir()

    on_close = os.urandom(4 * MiB + 100)
    (volume.path / "ckpt/closed.pt").write_bytes(on_close)
    assert file_state(volume.path / "ckpt/closed.pt")["state"] == "uploaded"
    assert set(block_objects(client, bucket).values()) == blocks_of(on_close)

    on_fsync = os.urandom(2 * MiB)
    with open(volume.path / "ckpt/synced.pt", "wb") as f:
        f.write(on_fsync)
        f.flush()
        os.fsync(f.fileno())
        assert file_state(volume.path / "ckpt/synced.pt")["state"] == "uploaded"
        assert set(block_objects(client, bucket).values()) == blocks_of(on_close) | blocks_of(on_fsync)

    local = volume.path / "scratch/tmp.bin"
    write_random(local, 16 * MiB)  # 2 s of uploads at the cap: close returns long before
    assert file_state(local)["state"] == "pending"
