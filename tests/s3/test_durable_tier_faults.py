"""What aifs says when the durable tier is gone, emptied or full of pending work: fsck and
mount refuse in one sentence instead of a traceback or a false "fine", fsck never writes
the volume marker, umount says what it left behind, and only writers see staging fill up."""

import errno
import os
import signal
import subprocess
import threading

import pytest
from conftest import aifs_cli

from aifs.tiers.protocol import object_name
from aifs.tiers.s3_marker import MARKER_NAME

from .helpers_mount import (
    PREFIX, MiB, bucket_keys, file_state, make_s3_volume, poll_status, sync_wait, wait_for, write_random,
)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

# A dead S3 must cost a second, not the defaults' minutes.
QUICK = {"connect_timeout": 0.5, "read_timeout": 1.0, "retries": 1, "breaker_failures": 2,
         "breaker_cooldown": 0.5}


def one_line_error(cp: subprocess.CompletedProcess) -> str:
    """The command's complaint, which must be one line, not a traceback."""
    assert "Traceback" not in cp.stderr, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    return lines[0]


def written_and_uploaded(volume, name: str = "data.bin", size: int = 3 * MiB) -> str:
    """Mount, write one file, wait for it to reach the bucket, unmount; its digest."""
    volume.mount()
    digest = write_random(volume.path / name, size)
    sync_wait(volume.path)
    volume.umount()
    return digest


def emptied(volume, server):
    """A volume whose file reached the bucket, and then the bucket lost every object (the
    marker too) while the local tiers were wiped; a plain client of the bucket."""
    written_and_uploaded(volume)
    volume.wipe_local()
    client = server.client()
    for key in bucket_keys(client, volume.setup.bucket):
        client.delete_object(Bucket=volume.setup.bucket, Key=key)
    return client


@pytest.mark.timeout_s(120)
def test_fsck_with_s3_unreachable_says_so_and_exits_2(make_s3_volume, private_moto):
    volume = make_s3_volume(private_moto.endpoint, private_moto.create_bucket(), s3=QUICK)
    written_and_uploaded(volume)
    private_moto.stop()
    cp = aifs_cli("fsck", "-c", str(volume.config))
    assert cp.returncode == 2, cp
    assert "s3://" in one_line_error(cp)


@pytest.mark.timeout_s(120)
def test_fsck_reports_a_missing_marker_and_blocks_by_tier_name_without_writing(make_s3_volume, moto_server):
    bucket = moto_server.create_bucket()
    volume = make_s3_volume(moto_server.endpoint, bucket)
    client = emptied(volume, moto_server)
    cp = aifs_cli("fsck", "-c", str(volume.config))
    assert cp.returncode == 1, cp
    assert "missing-marker" in cp.stdout
    missing = [line for line in cp.stdout.splitlines() if line.startswith("missing-block")]
    assert missing and all("s3" in line and "objstore" not in line for line in missing), cp.stdout
    assert bucket_keys(client, bucket) == set()  # fsck wrote no marker, no object


@pytest.mark.timeout_s(150)
def test_mount_refuses_an_emptied_bucket_unless_told(make_s3_volume, moto_server):
    bucket = moto_server.create_bucket()
    volume = make_s3_volume(moto_server.endpoint, bucket)
    client = emptied(volume, moto_server)
    cp = aifs_cli("mount", "-c", str(volume.config), "-d", str(volume.path))
    assert cp.returncode == 1
    assert "no aifs volume marker" in cp.stderr and "--accept-missing-marker" in cp.stderr
    assert bucket_keys(client, bucket) == set()

    cp = aifs_cli("mount", "-c", str(volume.config), "-d", "--accept-missing-marker", str(volume.path))
    assert cp.returncode == 0, cp
    assert bucket_keys(client, bucket) == {PREFIX + MARKER_NAME}
    with pytest.raises(OSError) as lost:
        (volume.path / "data.bin").read_bytes()
    assert lost.value.errno == errno.EIO
    volume.umount()


@pytest.mark.timeout_s(120)
def test_umount_says_what_is_left_for_the_next_mount(make_s3_volume, private_moto):
    volume = make_s3_volume(private_moto.endpoint, private_moto.create_bucket(), s3=QUICK)
    volume.mount()
    private_moto.stop()
    write_random(volume.path / "late.bin", 2 * MiB + 5, fsync=True)
    assert file_state(volume.path / "late.bin")["state"] == "pending"
    cp = aifs_cli("umount", str(volume.path))
    assert cp.returncode == 0, cp
    assert "unmounted" in cp.stdout
    assert "3 blocks (2.0 MiB) were not yet in the durable tier" in cp.stdout, cp.stdout
    assert "upload on the next mount" in cp.stdout


@pytest.mark.timeout_s(120)
def test_umount_fails_when_the_mount_process_dies_while_flushing(make_s3_volume, moto_server):
    volume = make_s3_volume(moto_server.endpoint, moto_server.create_bucket())
    volume.mount()
    (volume.path / "f").write_bytes(b"x")
    (pid,) = volume.daemon_pids()
    os.kill(pid, signal.SIGSTOP)
    umount = threading.Thread(target=lambda: results.append(aifs_cli("umount", str(volume.path))))
    results: list[subprocess.CompletedProcess] = []
    umount.start()
    wait_for(lambda: not any(line.split()[4] == str(volume.path) for line in open("/proc/self/mountinfo")),
             "the kernel to drop the mount", every=0.05)
    os.kill(pid, signal.SIGKILL)
    umount.join(60)
    (cp,) = results
    assert cp.returncode == 1, cp
    assert f"the mount process {pid} failed while flushing" in cp.stderr
    assert "unmounted /" not in cp.stdout


@pytest.mark.timeout_s(150)
def test_only_writers_see_a_full_staging_area_and_failed_writers_leave_no_open_file(make_s3_volume,
                                                                                      private_moto):
    volume = make_s3_volume(private_moto.endpoint, private_moto.create_bucket(), s3=QUICK, nvme="8MiB",
                            writeback={"dirty_wait": 1.0})
    volume.mount()
    private_moto.stop()
    with pytest.raises(OSError) as full:
        for i in range(16):
            write_random(volume.path / f"fill{i}.bin", 2 * MiB)
    assert full.value.errno == errno.ENOSPC

    writer = os.open(volume.path / "open.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    unsealed = b"w" * (MiB // 2)  # less than a block, more than staging has left: waits in the buffer
    os.write(writer, unsealed)
    reader = os.open(volume.path / "open.bin", os.O_RDONLY)
    assert os.read(reader, MiB) == unsealed
    os.close(reader)  # a reader's close seals nothing, so it cannot fail
    with pytest.raises(OSError) as sealed:
        os.close(writer)
    assert sealed.value.errno == errno.ENOSPC
    wait_for(lambda: poll_status(volume)["open_files"] == 0, "the failed files to be released")
