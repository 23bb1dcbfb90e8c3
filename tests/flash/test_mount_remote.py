"""The remote flash tier inside a mount: block servers as separate processes on 127.0.0.1, aifs
mounted through FUSE with ram, nvme, remote and objstore tiers.

Once the local tiers are wiped, files come back byte for byte from the flash servers and
not from the cold tier (the mount's own counters say so), also with a server SIGKILLed.
Below, the TierManager's side of the contract: the remote tier never holds the only copy
of a block unless `only_copy` says so, it never fails a read, and volumes sharing
servers never see each other's blocks.
"""

import json
import os
from pathlib import Path
import shutil
import threading
import time

import pytest
import trio
from conftest import Volume, aifs_cli  # tests/conftest.py: mount, umount and cleanup of one volume
from tests.helpers import LOCAL_TIERS, random_page_reads

from aifs.tiers.background import BackgroundCalls
from aifs.flash.tier import RemoteFlashTier
from aifs.rdma.auth import Secret
from aifs.rdma.tcp import TcpTransport
from aifs.rdma.transport import Address
from aifs.tiers.checksum import CHUNK, checksum
from aifs.tiers.manager import TierManager
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.ram import RamTier

BLOCK = 1 << 20
HOLD_TIMEOUT_S = 20.0

CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "1MiB"

""" + LOCAL_TIERS + """
[[tiers]]
kind = "remote"
servers = [{servers}]
secret_file = "{secret_file}"
transport = "tcp"
timeout = 0.5
read_bound = 1.0
{placement}

[[tiers]]
kind = "objstore"
"""

# placement config line, and how many objects (copies or shards) the servers hold per block
PLACEMENTS = {
    "replicas": ("replicas = 2", 2),
    "erasure": ("erasure = { k = 2, m = 1 }", 3),
}


def server_stats(addresses: list[str], secret: Secret) -> list:
    """Asked directly: the mount's own figures are refreshed only every few seconds."""
    connections = [TcpTransport(1, 2.0, secret=secret).connect(Address.parse(a)) for a in addresses]
    try:
        return [connection.stat(2.0) for connection in connections]
    finally:
        for connection in connections:
            connection.close()


def server_used(addresses: list[str], secret: Secret) -> int:
    return sum(stat.used for stat in server_stats(addresses, secret))


def server_objects(addresses: list[str], secret: Secret) -> int:
    return sum(stat.blocks for stat in server_stats(addresses, secret))


def blocks_of(files: dict[str, bytes]) -> int:
    return sum(-(-len(data) // BLOCK) for data in files.values())


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def status(volume: Volume) -> dict:
    cp = aifs_cli("status", str(volume.path), "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def remount_with_nvme_wiped(volume: Volume) -> None:
    volume.umount()
    shutil.rmtree(volume.state_dir / "nvme")
    volume.mount()


def assert_read_from_remote(volume: Volume, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert (volume.path / name).read_bytes() == data, name
    tiers = status(volume)["tiers"]
    total = sum(map(len, files.values()))
    assert tiers["objstore"]["bytes_read"] == 0, tiers
    assert tiers["remote"]["bytes_read"] == total, tiers
    assert tiers["remote"]["hits"] == blocks_of(files), tiers


@pytest.fixture
def files() -> dict[str, bytes]:
    return {
        "empty": b"",
        "small.txt": b"hello flash\n",
        "one-block.bin": os.urandom(BLOCK),
        "dir/multi.bin": os.urandom(3 * BLOCK + 12345),
        "dir/tail.bin": os.urandom(200_000),
    }


def remote_volume(base: Path, servers: list, placement: str = "replicas = 2") -> Volume:
    """An unmounted volume whose remote tier lists `servers` (sharing one secret)."""
    volume = Volume(base)
    volume.config.write_text(CONFIG.format(
        state_dir=volume.state_dir, servers=", ".join(f'"{s.address}"' for s in servers), placement=placement,
        secret_file=servers[0].secret_file,
    ))
    return volume


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_files_come_back_from_flash_after_local_tiers_are_wiped(tmp_path, flash_servers, files, placement):
    servers = flash_servers(3)
    addresses = [s.address for s in servers]
    line, per_block = PLACEMENTS[placement]
    volume = remote_volume(tmp_path / "vol", servers, line)
    try:
        volume.mount()
        os.makedirs(volume.path / "dir")
        for name, data in files.items():
            (volume.path / name).write_bytes(data)
        cp = aifs_cli("sync", "--wait", str(volume.path))
        assert cp.returncode == 0, cp.stderr
        # offers run in the background once uploads are durable
        objects = blocks_of(files) * per_block
        wait_until(lambda: server_objects(addresses, servers[0].secret) == objects, HOLD_TIMEOUT_S,
                   f"the servers hold {per_block} objects for each of the {blocks_of(files)} blocks")

        remount_with_nvme_wiped(volume)
        assert_read_from_remote(volume, files)

        servers[0].kill()
        remount_with_nvme_wiped(volume)
        assert_read_from_remote(volume, files)  # every block still has a copy or k shards
    finally:
        volume.close()


def test_random_pages_read_one_chunk_each_from_flash(tmp_path, flash_servers):
    """A small random read of a block held by flash servers reads only the chunk it needs (while
    the reads stay within a few of the file's blocks)."""
    servers = flash_servers(2)
    addresses, secret = [s.address for s in servers], servers[0].secret
    volume = remote_volume(tmp_path / "vol", servers)
    data = os.urandom(8 * BLOCK)
    try:
        volume.mount()
        (volume.path / "index.bin").write_bytes(data)
        assert aifs_cli("sync", "--wait", str(volume.path)).returncode == 0
        wait_until(lambda: server_objects(addresses, secret) == 16, HOLD_TIMEOUT_S,
                   "both copies of 8 blocks are held")
        remount_with_nvme_wiped(volume)
        offsets = [b * BLOCK + b * 4096 for b in (6, 1, 4)]  # jumps: never the next block
        got = random_page_reads(volume.path / "index.bin", offsets)
        assert got == [data[o:o + 4096] for o in offsets]
        tiers = status(volume)["tiers"]
        assert (tiers["remote"]["hits"], tiers["remote"]["bytes_read"]) == (3, 3 * CHUNK), tiers
        assert tiers["objstore"]["bytes_read"] == 0, tiers
    finally:
        volume.close()


# -- the TierManager's side ----------------------------------------------------------------


def manager_over(root, servers, only_copy: bool = False, namespace: bytes = b"vol") -> TierManager:
    remote = RemoteFlashTier([s.address for s in servers], replicas=2, transport="tcp", timeout=0.5,
                             read_bound=1.0, namespace=namespace, secret=servers[0].secret)
    return TierManager(RamTier(64 * BLOCK), NvmeTier(root / "nvme", 64 * BLOCK),
                       LocalObjectStore(root / "cold", 1 << 30), remote=remote, only_copy=only_copy)


def pinned_on(addresses: list[str], secret: Secret) -> int:
    return sum(stat.pinned for stat in server_stats(addresses, secret))


def settle(tiers: TierManager) -> None:
    assert tiers.background is not None and tiers.background.wait_idle(HOLD_TIMEOUT_S)


async def stage_and_upload(tiers: TierManager, block_id: int, data: bytes, servers) -> tuple:
    """(bytes on the servers after staging, pinned there), then the same once the upload is durable."""
    addresses, secret = [s.address for s in servers], servers[0].secret
    await tiers.stage(block_id, data)
    await trio.to_thread.run_sync(settle, tiers)
    staged = (await trio.to_thread.run_sync(server_used, addresses, secret),
              await trio.to_thread.run_sync(pinned_on, addresses, secret))
    await tiers.upload(block_id, checksum(data))
    await tiers.uploads_durable([block_id])
    await trio.to_thread.run_sync(settle, tiers)
    durable = (await trio.to_thread.run_sync(server_used, addresses, secret),
               await trio.to_thread.run_sync(pinned_on, addresses, secret))
    return staged, durable


@pytest.mark.parametrize("only_copy", [False, True])
def test_remote_holds_a_block_before_it_is_durable_only_with_only_copy(tmp_path, flash_servers, only_copy):
    servers = flash_servers(2)
    tiers = manager_over(tmp_path, servers, only_copy)
    data = os.urandom(BLOCK)
    try:
        (staged_used, staged_pins), (durable_used, durable_pins) = trio.run(
            stage_and_upload, tiers, 7, data, servers)
    finally:
        trio.run(tiers.close)
        tiers.nvme.close()
    if only_copy:
        assert staged_used >= 2 * BLOCK and staged_pins == 2  # pinned on both replicas while not durable
    else:
        assert staged_used == 0 and staged_pins == 0  # never the only copy
    assert durable_used >= 2 * BLOCK and durable_pins == 0


async def read_twice(tiers: TierManager, block_id: int, data: bytes) -> list[bytes]:
    """Read from cold (which offers the block to flash), then again with the local copies dropped."""
    first = await tiers.read(block_id, checksum(data), len(data))
    await trio.to_thread.run_sync(settle, tiers)
    tiers.ram.delete(block_id)
    tiers.nvme.delete(block_id)
    second = await tiers.read(block_id, checksum(data), len(data))
    return [first, second]


def test_a_block_read_from_cold_is_offered_then_read_from_flash_and_filled_into_nvme(tmp_path, flash_servers):
    tiers = manager_over(tmp_path, flash_servers(2))
    data = os.urandom(BLOCK)
    tiers.cold.put(9, data)
    try:
        assert trio.run(read_twice, tiers, 9, data) == [data, data]
        assert tiers.fills is not None and tiers.fills.wait_idle(HOLD_TIMEOUT_S)
        assert tiers.nvme.get(9) == data  # copied down in the background
    finally:
        trio.run(tiers.close)
        tiers.nvme.close()
    assert tiers.stats["objstore"].hits == 1 and tiers.stats["remote"].hits == 1


def test_reads_fall_through_to_cold_when_every_server_is_dead(tmp_path, flash_servers):
    servers = flash_servers(2)
    tiers = manager_over(tmp_path, servers)
    data = os.urandom(BLOCK)
    tiers.cold.put(11, data)
    for server in servers:
        server.kill()
    try:
        started = time.monotonic()
        assert trio.run(tiers.read, 11, checksum(data), len(data)) == data
        elapsed = time.monotonic() - started
    finally:
        trio.run(tiers.close)
        tiers.nvme.close()
    assert tiers.stats["objstore"].hits == 1 and tiers.stats["remote"].hits == 0
    assert elapsed < 2 * 1.0 + 5  # at most the read bound per replica, plus slack for a loaded machine


def test_volumes_sharing_servers_never_read_each_others_blocks(tmp_path, flash_servers):
    servers = flash_servers(2)
    addresses, secret = [s.address for s in servers], servers[0].secret
    ours = RemoteFlashTier(addresses, transport="tcp", namespace=b"volume-a", secret=secret)
    theirs = RemoteFlashTier(addresses, transport="tcp", namespace=b"volume-b", secret=secret)
    try:
        ours.put(5, b"a" * 1000)
        theirs.put(5, b"b" * 1000)
        assert ours.get(5) == b"a" * 1000 and theirs.get(5) == b"b" * 1000
        theirs.delete(5)
        assert ours.get(5) == b"a" * 1000 and theirs.get(5) is None
    finally:
        ours.close()
        theirs.close()


def test_background_offers_are_dropped_not_queued_when_the_backlog_is_full():
    calls = BackgroundCalls(workers=1, max_calls=2, max_bytes=10)
    release = threading.Event()
    ran: list[int] = []
    try:
        assert calls.submit(lambda: (release.wait(5), ran.append(1)))
        assert calls.submit(ran.append, 2)
        assert not calls.submit(ran.append, 3)                # two calls queued already
        release.set()
        assert calls.wait_idle(5)
        assert calls.submit(ran.append, 4, nbytes=10)
        assert not calls.submit(ran.append, 5, nbytes=11)     # more bytes than the budget
        assert calls.wait_idle(5)
    finally:
        calls.close()
    assert ran == [1, 2, 4] and calls.dropped == 2
