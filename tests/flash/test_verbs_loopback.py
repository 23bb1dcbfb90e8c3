"""The verbs transport end to end, with the NIC simulated in one process.

A real BlockServer (trio, TCP channel, key exchange, `locate`) runs in a
thread; its registered arena and the client's registered pool are ordinary
memory in this process, so an RDMA READ is a memmove between the addresses
the two sides exchanged. Everything runs except the pyverbs calls themselves.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from types import SimpleNamespace

import pytest
import trio

from aifs.flash.server import BlockServer
from aifs.flash.store import BlockStore
from aifs.rdma.auth import Secret
from aifs.rdma.keys import QpInfo, RegionInfo
from aifs.rdma.pool import BufferPool, address_of
from aifs.rdma.slots import SlotArena
from aifs.rdma.transport import BlockMissing
from aifs.rdma.verbs_transport import VerbsTransport

from .blocks import content

GID = "fe80:0000:0000:0000:0000:0000:0000:0001"
SECRET = Secret(b"a test secret of more than thirty-two characters")
RKEY, LKEY = 0x5151, 0x7272
SLOT = 64 << 10


class FakeQp:
    """A queue pair whose READs are memmoves; it checks the keys the client uses."""

    numbers = iter(range(100, 1 << 24))

    def __init__(self) -> None:
        self.qp_num = next(self.numbers)
        self.peer: QpInfo | None = None
        self.broken = False
        self.reads = 0

    def local_info(self) -> QpInfo:
        return QpInfo(self.qp_num, 7, 1, GID, 3)

    def connect(self, remote: QpInfo) -> None:
        self.peer = remote

    def read(self, reads, rkey, lkey, timeout) -> None:
        assert self.peer is not None and (rkey, lkey) == (RKEY, LKEY)
        for remote, local, length in reads:
            ctypes.memmove(local, remote, length)
        self.reads += len(reads)

    def close(self) -> None:
        pass


class FakeEndpoint:
    """The server's verbs half: a real SlotArena over memory whose address goes out in the key exchange."""

    def __init__(self, slots: int = 4) -> None:
        self.memory = bytearray(slots * SLOT)
        self.arena = SlotArena(memoryview(self.memory), SLOT)
        self.region = RegionInfo(address_of(self.memory), RKEY, len(self.memory), SLOT)
        self.accepted: list[QpInfo] = []

    def accept(self, client: QpInfo) -> FakeQp:
        self.accepted.append(client)
        qp = FakeQp()
        qp.connect(client)
        return qp


class FakeNic:
    v = SimpleNamespace(PyverbsError=RuntimeError)

    def __init__(self) -> None:
        self.qps: list[FakeQp] = []

    def queue_pair(self, remote_read: bool) -> FakeQp:
        self.qps.append(FakeQp())
        return self.qps[-1]


def serve_in_thread(server: BlockServer):
    """Run the server on 127.0.0.1 in a thread; returns (address, stop)."""
    ready: queue.Queue = queue.Queue()

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.serve, "127.0.0.1", 0)
            ready.put((address, trio.lowlevel.current_trio_token(), stop))
            await stop.wait()
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    address, token, stop = ready.get(timeout=10)

    def shutdown() -> None:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(10)

    return address, shutdown


@pytest.fixture(params=["verbs server", "tcp-only server"])
def rig(request, tmp_path):
    store = BlockStore(tmp_path, 64 << 20)
    endpoint = FakeEndpoint() if request.param == "verbs server" else None
    address, shutdown = serve_in_thread(BlockServer(store, SECRET, endpoint))
    transport = VerbsTransport("fake0", streams=2, timeout=5.0, pool_bytes=4 * SLOT, chunk_bytes=SLOT, secret=SECRET)
    nic = FakeNic()
    opened = (nic, BufferPool(bytearray(4 * SLOT), SLOT), SimpleNamespace(lkey=LKEY))
    transport.opened = lambda: opened  # the device, its pool and MR, as opened() would return them
    conn = transport.connect(address)
    yield SimpleNamespace(conn=conn, endpoint=endpoint, nic=nic)
    conn.close()
    shutdown()
    store.close()


def test_reads_are_one_sided_after_one_locate(rig):
    data = content(1, 40_000)
    rig.conn.write(1, data)
    assert rig.conn.read(1) == data
    part = bytearray(1000)
    assert rig.conn.read_into(1, part, 30_000) == 1000 and bytes(part) == data[30_000:31_000]
    if rig.endpoint is None:  # the server declined the key exchange: reads went over TCP
        assert sum(qp.reads for qp in rig.nic.qps) == 0
        return
    assert len(rig.endpoint.accepted) == 2  # one queue pair per stream, keys exchanged over TCP
    assert {qp.qp_num for qp in rig.nic.qps} == {info.qp_num for info in rig.endpoint.accepted}
    assert sum(qp.reads for qp in rig.nic.qps) == 6  # header, bytes, header for each read


def test_a_deleted_block_is_not_read_from_its_old_slot(rig):
    rig.conn.write(2, content(2, 5000))
    assert rig.conn.read(2) == content(2, 5000)
    rig.conn.delete(2)
    with pytest.raises(BlockMissing):
        rig.conn.read_into(2, bytearray(5000))


def test_blocks_larger_than_a_slot_are_read_over_tcp(rig):
    data = content(3, SLOT + 1)
    rig.conn.write(3, data)
    assert rig.conn.read(3) == data


def test_many_blocks_through_few_slots_from_many_threads(rig):
    blocks = {b: content(b, 1000 * b) for b in range(10, 30)}
    for block_id, data in blocks.items():
        rig.conn.write(block_id, data)
    wrong = []

    def reader(seed: int) -> None:
        try:
            for i in range(30):
                block_id = 10 + (seed * 7 + i) % 20
                buf = bytearray(len(blocks[block_id]))
                n = rig.conn.read_into(block_id, buf)  # a slot that keeps moving is read over TCP instead
                if bytes(buf[:n]) != blocks[block_id]:
                    wrong.append(block_id)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            wrong.append(repr(e))

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
