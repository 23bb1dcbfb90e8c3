"""A minute and more of bounded random faults against one mount with RAM + NVMe + remote flash
(three block servers) + S3 tiers, all real processes on 127.0.0.1.

Faults, drawn in a shuffled round so that each kind happens: flipped bytes in NVMe segment
files and in S3 objects, flash servers killed (and restarted) or frozen, S3 frozen, the NVMe
disk (a small tmpfs) filled up, malformed control and block-protocol frames, a flash server
starved of file descriptors (prlimit), and the mount itself killed with SIGKILL and mounted
again. Between faults, files are written; those whose close() succeeded are acknowledged.

After every fault: every acknowledged file reads back identical or fails with a clean EIO
(a flipped byte may destroy the only copy of a block, which must never be served), and no
aifs process has died except those the test killed. At the end, `aifs fsck` without
--repair reports without changing a byte of the volume, and a remount still serves every
acknowledged file identical or with EIO. The seed is printed; AIFS_FAULT_SEED replays a run.
"""

import errno
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import aifs_cli
from flash.servers import ServerProcess, new_secret_file, start_all
from helpers import tree_digest
from smallfs import SmallFs, small_fs_at

from aifs.tiers.s3_marker import MARKER_NAME

from .helpers_mount import MiB, bucket_keys, make_s3_volume, sha256_file, write_random

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

DURATION_S = float(os.environ.get("AIFS_FAULT_SECONDS", "40"))
SEED = int(os.environ.get("AIFS_FAULT_SEED", str(time.time_ns() % 2**32)))
NVME_DISK = "48m"
FREEZE_S = 2.0
QUICK_S3 = {"connect_timeout": 0.5, "read_timeout": 2.0, "retries": 1, "breaker_failures": 3,
            "breaker_cooldown": 1.0}


class Rig:
    """The mount, its servers, and the files it acknowledged."""

    def __init__(self, volume, moto, servers: list[ServerProcess], disk: SmallFs, rng: random.Random) -> None:
        self.volume, self.moto, self.servers, self.disk, self.rng = volume, moto, servers, disk, rng
        self.nvme = disk.path
        self.acked: dict[str, str] = {}
        self.clean_errors = 0
        self.written = 0
        self.daemon = self._daemon_pid()

    def _daemon_pid(self) -> int:
        (pid,) = self.volume.daemon_pids()
        return pid

    # -- work and checks -------------------------------------------------------------------------

    def write_batch(self) -> None:
        """A few files of random sizes, some fsynced; a file counts once its close() succeeded."""
        for _ in range(3):
            name = f"f{self.written:04d}.bin"
            self.written += 1
            size = self.rng.choice((0, 100, 64 << 10, MiB - 1, 2 * MiB + 3))
            try:
                self.acked[name] = write_random(self.volume.path / name, size, fsync=self.rng.random() < 0.5)
            except OSError as e:
                assert e.errno in (errno.ENOSPC, errno.EIO), f"writing {name}: {e!r}"

    def verify(self, when: str) -> None:
        for name, digest in self.acked.items():
            try:
                got = sha256_file(self.volume.path / name)
            except OSError as e:
                assert e.errno == errno.EIO, f"{when}: reading {name} failed with {e!r}, not a clean EIO"
                self.clean_errors += 1
                continue
            assert got == digest, f"{when}: {name} read back different bytes"

    def check_alive(self, when: str) -> None:
        assert Path(f"/proc/{self.daemon}").exists(), f"{when}: the mount process {self.daemon} died"
        for server in self.servers:
            assert server.proc is not None and server.proc.poll() is None, \
                f"{when}: flash server {server.address} died: {server.log.read_text()[-2000:]}"
        assert self.moto.proc is not None and self.moto.proc.poll() is None, f"{when}: the S3 server died"

    # -- faults --------------------------------------------------------------------------------------

    def flip_segment_byte(self) -> None:
        segments = sorted(self.nvme.glob("**/seg-*.log"))
        if segments:
            flip(self.rng.choice(segments), self.rng)

    def flip_object_byte(self) -> None:
        client = self.moto.client()
        keys = sorted(k for k in bucket_keys(client, self.volume.setup.bucket) if not k.endswith(MARKER_NAME))
        if keys:
            key = self.rng.choice(keys)
            data = bytearray(client.get_object(Bucket=self.volume.setup.bucket, Key=key)["Body"].read())
            if data:
                data[self.rng.randrange(len(data))] ^= 0xFF
                client.put_object(Bucket=self.volume.setup.bucket, Key=key, Body=bytes(data))

    def kill_flash_server(self) -> None:
        self.rng.choice(self.servers).restart()

    def freeze_flash_server(self) -> None:
        server = self.rng.choice(self.servers)
        server.signal(signal.SIGSTOP)
        try:
            self.write_batch()
            time.sleep(FREEZE_S)
        finally:
            server.signal(signal.SIGCONT)

    def freeze_s3(self) -> None:
        self.moto.freeze()
        try:
            self.write_batch()
            time.sleep(FREEZE_S)
        finally:
            self.moto.thaw()

    def fill_nvme_disk(self) -> None:
        self.disk.fill()
        try:
            self.write_batch()
        finally:
            self.disk.free()

    def garbage_to_control(self) -> None:
        for frame in garbage_frames(self.rng):
            send_and_close(socket.AF_UNIX, str(self.volume.state_dir / "control.sock"), frame)

    def garbage_to_flash_server(self) -> None:
        server = self.rng.choice(self.servers)
        for frame in garbage_frames(self.rng):
            send_and_close(socket.AF_INET, ("127.0.0.1", server.port), frame)

    def starve_flash_server_of_descriptors(self) -> None:
        server = self.rng.choice(self.servers)
        pid = str(server.proc.pid)
        soft, hard = descriptor_limits(server.proc.pid)
        subprocess.run(["prlimit", "--pid", pid, f"--nofile=24:{hard}"], check=True)  # the soft limit: it goes back up
        try:
            held = []
            for _ in range(48):
                try:
                    held.append(socket.create_connection(("127.0.0.1", server.port), timeout=1))
                except OSError:
                    break
            self.write_batch()
            for sock in held:
                sock.close()
        finally:
            subprocess.run(["prlimit", "--pid", pid, f"--nofile={soft}:{hard}"], check=True)

    def kill_mount(self) -> None:
        self.volume.kill9()
        self.volume.mount()
        self.daemon = self._daemon_pid()


def flip(path: Path, rng: random.Random) -> None:
    size = path.stat().st_size
    if size:
        with open(path, "r+b", buffering=0) as f:
            offset = rng.randrange(size)
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))


def garbage_frames(rng: random.Random) -> list[bytes]:
    """Random bytes, a huge announced length, a truncated frame, a valid length with junk."""
    return [rng.randbytes(rng.randrange(1, 64)), b"\xff\xff\xff\xff", b"\x00\x00\x00\x10\x81",
            (12).to_bytes(4, "big") + rng.randbytes(12), (1 << 30).to_bytes(4, "little") + bytes(8)]


def send_and_close(family: int, address, frame: bytes) -> None:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(address)
            sock.sendall(frame)
    except OSError:
        pass  # the peer may refuse or cut us off: that is its right


def descriptor_limits(pid: int) -> tuple[str, str]:
    line = next(l for l in Path(f"/proc/{pid}/limits").read_text().splitlines() if l.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return soft, hard


@pytest.mark.timeout_s(DURATION_S + 300)
def test_random_faults_lose_nothing_acknowledged_and_kill_nothing(make_s3_volume, private_moto, tmp_path):
    rng = random.Random(SEED)
    print(f"fault injection seed {SEED} (AIFS_FAULT_SEED replays it)")
    secret = new_secret_file(tmp_path / "block.secret")
    servers = start_all([ServerProcess(tmp_path / f"flash{i}", secret_file=secret) for i in range(3)])
    with small_fs_at(tmp_path / "nvme-disk", NVME_DISK) as disk:
        try:
            volume = make_s3_volume(
                private_moto.endpoint, private_moto.create_bucket(), nvme="40MiB", nvme_path=str(disk.path),
                s3=QUICK_S3,
                writeback={"dirty_wait": 1.0},
                remote={"servers": [s.address for s in servers], "secret_file": str(secret), "timeout": 0.5,
                        "read_bound": 1.0, "probe_interval": 0.5})
            volume.mount()
            rig = Rig(volume, private_moto, servers, disk, rng)
            run_faults(rig)
            check_fsck_changes_nothing(rig)
        finally:
            for server in servers:
                server.kill()


def run_faults(rig: Rig) -> None:
    faults: list[Callable[[], None]] = [
        rig.flip_segment_byte, rig.flip_object_byte, rig.kill_flash_server, rig.freeze_flash_server,
        rig.freeze_s3, rig.fill_nvme_disk, rig.garbage_to_control, rig.garbage_to_flash_server,
        rig.starve_flash_server_of_descriptors, rig.kill_mount,
    ]
    rig.write_batch()
    deadline = time.monotonic() + DURATION_S
    rounds = 0
    while time.monotonic() < deadline or rounds < len(faults):
        order = faults[:]
        rig.rng.shuffle(order)
        for fault in order:
            fault()
            rig.write_batch()
            rig.verify(f"after {fault.__name__}")
            rig.check_alive(f"after {fault.__name__}")
            rounds += 1
    print(f"{rounds} faults, {len(rig.acked)} files acknowledged, {rig.clean_errors} clean EIO reads")


def check_fsck_changes_nothing(rig: Rig) -> None:
    """fsck without --repair reports, never destroys; the files are still served after it."""
    rig.volume.umount()
    before = tree_digest(rig.volume.state_dir, rig.nvme)
    cp = aifs_cli("fsck", "-c", str(rig.volume.config), timeout=300)
    assert cp.returncode in (0, 1), cp
    assert "Traceback" not in cp.stderr, cp.stderr
    assert tree_digest(rig.volume.state_dir, rig.nvme) == before, "fsck without --repair changed the volume"
    rig.volume.mount()
    rig.daemon = rig._daemon_pid()
    rig.verify("after fsck and a remount")
    rig.volume.umount()
