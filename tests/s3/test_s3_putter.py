"""The S3 tier's upload process: PUTs run in a child, land intact, survive the child's
death (the PUTs it held fail, the next one starts a new child), and the child never
outlives the process that started it."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aifs.tiers import s3_putter
from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_retry import S3Error

from .conftest import ACCESS_KEY, SECRET_KEY, new_volume, s3_settings

MiB = 1 << 20


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def gone(pid: int, within: float) -> bool:
    """Exited within `within` seconds (a zombie nobody has reaped yet counts as exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_puts_run_in_a_process_of_their_own_and_land_intact(open_tier, moto_server, bucket):
    tier = open_tier(upload_process=True)
    assert tier.upload_pid is None, "started on the first PUT, not before"
    blocks = {block_id: os.urandom(4 * MiB if block_id % 2 else 1000 + block_id) for block_id in range(1, 25)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: tier.put(*item), blocks.items()))
    pid = tier.upload_pid
    assert pid is not None and pid != os.getpid() and "aifs.tiers.s3_putter" in cmdline(pid)
    client = moto_server.client()
    for block_id, data in blocks.items():
        assert client.get_object(Bucket=bucket, Key=f"{block_id:02x}/{block_id:016x}")["Body"].read() == data
    assert tier.used() == sum(map(len, blocks.values()))
    tier.close()
    assert gone(pid, 5)


def test_a_killed_upload_process_fails_its_puts_and_the_next_put_starts_another(private_moto):
    bucket = private_moto.create_bucket()
    tier = S3Tier(s3_settings(private_moto, bucket, upload_process=True), 1 << 50, new_volume())
    try:
        tier.put(1, b"first")
        first = tier.upload_pid
        private_moto.freeze()  # the next PUT hangs in the child
        failure: list[BaseException] = []
        putter = threading.Thread(target=lambda: failure.extend(_raised(tier.put, 2, b"lost")))
        putter.start()
        time.sleep(0.5)
        os.kill(first, signal.SIGKILL)
        putter.join(10)
        assert not putter.is_alive(), "a PUT held by a dead child must not hang"
        (error,) = failure
        assert isinstance(error, S3Error) and error.transient and "exited" in str(error)
        private_moto.thaw()
        tier.put(2, b"second")
        assert tier.upload_pid not in (None, first)
        assert tier.get(1) == b"first" and tier.get(2) == b"second"
    finally:
        private_moto.thaw()
        tier.close()


def _raised(fn, *args) -> list[BaseException]:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the test to look at
        return [exc]
    return []


def test_without_the_upload_process_puts_run_here(open_tier):
    tier = open_tier(upload_process=False)
    tier.put(1, b"here")
    assert tier.upload_pid is None and tier.get(1) == b"here"


def test_a_child_that_cannot_start_leaves_the_puts_to_the_mount(open_tier, monkeypatch, caplog):
    monkeypatch.setattr(s3_putter.sys, "executable", "/bin/false")  # exits before its handshake
    tier = open_tier(upload_process=True)
    tier.put(1, b"here all the same")
    assert tier.upload_pid is None and tier.get(1) == b"here all the same"
    assert "did not start" in caplog.text and "PUTs run in the mount's process" in caplog.text


def test_bytes_larger_than_a_block_are_put_here(open_tier):
    tier = open_tier(volume=new_volume(block_size=64 << 10), upload_process=True)
    data = os.urandom(100 << 10)  # larger than a slot: not the child's to send
    tier.put(2, data)
    assert tier.upload_pid is None and tier.get(2) == data


CHILD = """
import sys, time
from aifs.config.models import S3Tier as S3Settings
from aifs.tiers import s3_putter
from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_marker import VolumeMarker
settings = S3Settings.model_validate_json(sys.argv[1])
tier = S3Tier(settings, 1 << 50, VolumeMarker("11111111-2222-3333-4444-555555555555", 4 << 20, 1))
tier.put(1, b"x")
print(tier.upload_pid, flush=True)
time.sleep(60)
"""


def test_the_upload_process_never_outlives_its_mount_even_after_kill_9(moto_server, bucket):
    keys = {"kind": "s3", "endpoint": moto_server.endpoint, "bucket": bucket,
            "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "upload_process": True}
    mount = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(keys)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(mount.stdout.readline())
        assert "aifs.tiers.s3_putter" in cmdline(pid)
        mount.send_signal(signal.SIGKILL)
        mount.wait(10)
        assert gone(pid, 5), "the upload process stays after its mount was killed"
    finally:
        mount.kill()
        mount.wait()

