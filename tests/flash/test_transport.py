"""The conformance suite of the block protocol: a flash server over TCP, and over verbs wherever an RDMA
device exists, and the block server a mount runs for its peers (TCP).

Each test talks to a real server process through the transport under test: an `aifs flash serve`
process, or an aifs mount (FUSE) of a shared volume on a redis-server and an S3 bucket. Where a peer
promises less than a flash server, because it caches for its own mount, a test asserts what the
peer does promise (`Served.is_peer`).
"""

from __future__ import annotations

import random
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from aifs.rdma.auth import AuthError, Secret
from aifs.rdma.device import probe_verbs
from aifs.rdma.select import select_transport
from aifs.rdma.transport import Address, BlockMissing, Connection, RemoteError, Transport, TransportError
from aifs.tiers.checksum import checksum

from .blocks import content, find_on_disk, flip_byte
from .peer_mount import PeerMount
from .servers import ServerProcess

MiB = 1 << 20


@dataclass
class Served:
    kind: str  # "tcp" or "verbs": a flash server over that transport; "peer": a mount serving its peers
    server: ServerProcess | PeerMount
    transport: Transport
    conn: Connection

    @property
    def is_peer(self) -> bool:
        """A peer's tiers are its own mount's cache: it takes no pinned blocks, refuses deletes and
        unpins, and serves the copy it holds with that copy's checksum (the reader checks the bytes
        against the checksum its metadata keeps)."""
        return self.kind == "peer"


def _skip_without_device(kind: str) -> None:
    if kind == "verbs":
        probe = probe_verbs()
        if probe.device is None:
            pytest.skip(f"the verbs transport needs an RDMA device: {probe.reason}")


def _start(kind: str, request: pytest.FixtureRequest, base: Path) -> ServerProcess | PeerMount:
    if kind == "peer":
        moto, redis = request.getfixturevalue("moto_server"), request.getfixturevalue("redis_server")
        return PeerMount(base, moto, redis).start()
    _skip_without_device(kind)
    return ServerProcess(base / "server", transport=kind).start()


@pytest.fixture(scope="module", params=["tcp", "verbs", "peer"])
def served(request, tmp_path_factory):
    server = _start(request.param, request, tmp_path_factory.mktemp("conformance"))
    try:
        transport = select_transport(server.transport, timeout=5.0, secret=server.secret)
        conn = transport.connect(Address.parse(server.address))
        yield Served(request.param, server, transport, conn)
        conn.close()
        transport.close()
    finally:
        server.kill()


_ids = iter(range(1, 1 << 40))


def fresh_id() -> int:
    return next(_ids) * 7919


@pytest.mark.parametrize("size", [0, 1, 4096, MiB + 3, 4 * MiB])
def test_a_written_block_reads_back_whole(served, size):
    block_id = fresh_id()
    data = content(block_id, size)
    served.conn.write(block_id, data)
    assert served.conn.read(block_id) == data
    buf = bytearray(size + 10)
    assert served.conn.read_into(block_id, buf) == size
    assert buf[:size] == data and buf[size:] == bytes(10)


def test_ranges_land_in_the_callers_buffer(served):
    block_id = fresh_id()
    data = content(block_id, 256 << 10)
    served.conn.write(block_id, data)
    big = bytearray(b"\xee" * 10_000)
    window = memoryview(big)[1000:5096]  # a slice of a larger buffer: bytes outside it stay untouched
    assert served.conn.read_into(block_id, window, offset=12345) == 4096
    assert big[1000:5096] == data[12345:12345 + 4096]
    assert big[:1000] == b"\xee" * 1000 and big[5096:] == b"\xee" * (10_000 - 5096)
    tail = bytearray(4096)
    assert served.conn.read_into(block_id, tail, offset=len(data) - 100) == 100
    assert tail[:100] == data[-100:]
    assert served.conn.read_into(block_id, bytearray(16), offset=len(data) + 5) == 0


def test_a_missing_block_is_a_miss_not_a_failure(served):
    block_id = fresh_id()
    with pytest.raises(BlockMissing):
        served.conn.read(block_id)
    with pytest.raises(BlockMissing):
        served.conn.read_into(block_id, bytearray(10))
    assert not served.conn.contains(block_id)


def test_a_put_whose_bytes_do_not_match_its_checksum_is_refused(served):
    block_id = fresh_id()
    data = content(block_id, 5000)
    with pytest.raises(RemoteError) as refused:
        served.conn.write(block_id, data, checksum=checksum(data) ^ 1)
    assert refused.value.code == "checksum"
    assert not served.conn.contains(block_id)


def test_blocks_are_immutable(served):
    block_id = fresh_id()
    first = content(block_id, 3000)
    served.conn.write(block_id, first)
    served.conn.write(block_id, b"other bytes")
    assert served.conn.read(block_id) == first


def assert_peer_refuses(peer: PeerMount, why: str, call: Callable[..., object], *args: object,
                        **kwargs: object) -> None:
    """A request a peer declines by design: answered `refused` with the reason, and no failure of
    its own in the mount's log."""
    with pytest.raises(RemoteError, match=why) as refused:
        call(*args, **kwargs)
    assert refused.value.code == "refused"
    assert "Traceback" not in peer.log_text()


def test_delete(served):
    block_id = fresh_id()
    served.conn.write(block_id, content(block_id, 100))
    assert served.conn.contains(block_id)
    if served.is_peer:
        assert_peer_refuses(served.server, "leave its tiers by eviction", served.conn.delete, block_id)
        assert served.conn.read(block_id) == content(block_id, 100)
        return
    served.conn.delete(block_id)
    assert not served.conn.contains(block_id)
    with pytest.raises(BlockMissing):
        served.conn.read(block_id)
    served.conn.delete(block_id)  # deleting twice is fine


def test_a_pinned_block_is_held_until_unpinned(served):
    block_id = fresh_id()
    data = content(block_id, 4000)
    pinned = served.conn.stat().pinned
    if served.is_peer:
        assert_peer_refuses(served.server, "take no pinned blocks", served.conn.write, block_id, data, pin=True)
        assert not served.conn.contains(block_id)
        assert_peer_refuses(served.server, "hold no pins of other nodes", served.conn.unpin, block_id)
        assert served.conn.stat().pinned == 0
        return
    served.conn.write(block_id, data, pin=True)
    assert served.conn.stat().pinned == pinned + 1
    served.conn.unpin(block_id)
    served.conn.unpin(block_id)  # unpinning twice is fine
    assert served.conn.stat().pinned == pinned
    assert served.conn.read(block_id) == data  # held until evicted


def test_stat_counts_what_was_stored(served):
    before = served.conn.stat()
    ids = [fresh_id() for _ in range(3)]
    for block_id in ids:
        served.conn.write(block_id, content(block_id, 10_000))
    after = served.conn.stat()
    assert after.blocks == before.blocks + 3
    assert after.used >= before.used + 30_000
    assert after.capacity == 256 * MiB and after.used <= after.capacity
    assert after.verbs == (served.transport.name == "verbs")


def test_requests_from_many_threads_pipeline_on_one_connection(served):
    ids = [fresh_id() for _ in range(24)]
    for i, block_id in enumerate(ids):
        served.conn.write(block_id, content(block_id, 1000 + i * 5000))
    errors: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                block_id = rng.choice(ids)
                expected = content(block_id, 1000 + ids.index(block_id) * 5000)
                if rng.random() < 0.5:
                    got = served.conn.read(block_id)
                else:
                    buf = bytearray(len(expected))
                    got = bytes(buf[:served.conn.read_into(block_id, buf)])
                if got != expected:
                    errors.append(f"block {block_id}: wrong bytes")
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(repr(e))

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_corrupted_copy_never_passes_for_the_block(served):
    block_id = fresh_id()
    data = content(block_id, 50_000)
    served.conn.write(block_id, data)
    path, offset = find_on_disk(served.server.root, data)
    flip_byte(path, offset + 20_000)
    if served.is_peer:  # it sends what its NVMe holds; the block's own checksum is the reader's to check
        got = served.conn.read(block_id)
        assert len(got) == len(data) and got != data and checksum(got) != checksum(data)
        return
    with pytest.raises(RemoteError) as caught:
        served.conn.read(block_id)
    assert caught.value.code == "corrupt"
    with pytest.raises(BlockMissing):  # the server dropped its rotten copy
        served.conn.read_into(block_id, bytearray(100))


def test_a_server_that_is_not_there_fails_fast(served):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = served.transport.connect(Address("127.0.0.1", port))
    started = time.monotonic()
    with pytest.raises(TransportError):
        conn.read(1, timeout=2.0)
    assert time.monotonic() - started < 1.0
    conn.close()


def test_a_client_without_the_secret_is_refused(served):
    stranger = select_transport(served.server.transport, timeout=5.0, secret=Secret(secrets.token_bytes(32)))
    try:
        with pytest.raises(AuthError, match="refused our secret"):
            stranger.connect(Address.parse(served.server.address)).contains(fresh_id())
    finally:
        stranger.close()
    block_id = fresh_id()
    served.conn.write(block_id, content(block_id, 100))  # the clients that hold the secret are served on
    assert served.conn.read(block_id) == content(block_id, 100)


def test_a_frozen_server_times_out_and_is_used_again_once_it_runs(served):
    block_id = fresh_id()
    served.conn.write(block_id, content(block_id, 2000))
    served.server.signal(signal.SIGSTOP)
    try:
        with pytest.raises(TransportError):
            served.conn.read(block_id, timeout=0.3)
    finally:
        served.server.signal(signal.SIGCONT)
    assert served.conn.read(block_id, timeout=5.0) == content(block_id, 2000)


def test_blocks_survive_a_server_restart(served):
    ids = [fresh_id() for _ in range(5)]
    for block_id in ids:
        served.conn.write(block_id, content(block_id, 7000))
    served.server.stop()
    served.server.start()
    for block_id in ids:  # the same connection object reconnects by itself
        assert served.conn.read(block_id, timeout=5.0) == content(block_id, 7000)
