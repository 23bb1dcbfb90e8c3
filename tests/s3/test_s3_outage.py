"""S3 frozen (SIGSTOP: connections are accepted, nothing answers) in the middle of a large
checkpoint write: the writes still complete on NVMe, the backlog shows in `aifs status`,
locally held data stays readable, and once S3 answers again the backlog drains with no loss."""

import re
import time

import pytest

from .helpers_mount import (
    MiB, assert_digests, make_s3_volume, poll_status, sha256_file, status, sync_wait, wait_for,
    write_random,
)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

FILES = 4
FILE_SIZE = 32 * MiB
CAP = "32MiB"  # slow enough that the first file is still uploading when S3 freezes
# A frozen S3 must cost seconds, not the defaults' minutes: short timeouts, a quick breaker.
S3_KEYS = {"connect_timeout": 1.0, "read_timeout": 2.0, "retries": 2,
           "breaker_failures": 3, "breaker_cooldown": 1.0}


def upload_failed(volume) -> bool:
    """The uploader has seen the outage (its retries ran out and it logged the failure)."""
    return re.search(r"upload of block [0-9a-f]{16} failed", volume.log_text()) is not None


@pytest.mark.timeout_s(150)
def test_checkpoint_completes_while_s3_is_frozen_and_drains_after(make_s3_volume, private_moto):
    bucket = private_moto.create_bucket()
    volume = make_s3_volume(private_moto.endpoint, bucket, s3=S3_KEYS,
                            writeback={"upload_bandwidth": CAP})
    volume.mount()
    (volume.path / "ckpt").mkdir()
    names = [f"ckpt/shard{i}.bin" for i in range(FILES)]
    digests = {names[0]: write_random(volume.path / names[0], FILE_SIZE)}
    wait_for(lambda: poll_status(volume)["uploaded_bytes"] > 0, "the first upload")

    private_moto.freeze()
    try:
        start = time.monotonic()
        for name in names[1:]:
            digests[name] = write_random(volume.path / name, FILE_SIZE, fsync=True)
        took = time.monotonic() - start
        print(f"{FILES - 1} x {FILE_SIZE // MiB} MiB written, fsynced and closed in {took:.2f} s "
              "with S3 frozen")
        backlog = status(volume.path)
        assert backlog["pending_blocks"] > 0, backlog
        print(f"backlog while frozen: {backlog['pending_blocks']} blocks, "
              f"{backlog['pending_bytes'] / MiB:.0f} MiB")
        assert sha256_file(volume.path / names[-1]) == digests[names[-1]]  # held locally
        wait_for(lambda: upload_failed(volume), "the uploader to give up on frozen S3", every=0.2)
    finally:
        private_moto.thaw()

    start = time.monotonic()
    print(sync_wait(volume.path).strip(), f"({time.monotonic() - start:.1f} s after thaw)")
    assert poll_status(volume)["pending_blocks"] == 0
    volume.reload_from_s3()
    assert_digests(volume.path, digests)
