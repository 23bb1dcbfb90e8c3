"""Every piece of the verbs transport that runs without an RDMA device.

The key-exchange messages, the registered buffer pool, the slot arena and the
client's slot reader (driven end to end by a fetch that copies memory where
the NIC would READ it), transport selection, and pyverbs detection.
"""

from __future__ import annotations

import logging
import mmap
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from aifs.rdma.auth import Secret
from aifs.rdma.device import Probe, load_pyverbs, probe_verbs
from aifs.rdma.keys import KeyExchangeError, QpInfo, RegionInfo
from aifs.rdma.pool import BufferPool, PoolExhausted
from aifs.rdma.select import choose, select_transport
from aifs.rdma.slots import HEADER, SlotArena, SlotChurn, SlotReader, SlotRef, SlotTooSmall
from aifs.rdma.tcp import TcpTransport
from aifs.rdma.transport import BlockMissing, TransportUnavailable
from aifs.rdma.verbs_transport import VerbsTransport
from aifs.tiers.checksum import CorruptBlock, checksum

from .blocks import content
from .servers import REPO, child_env

GID = "fe80:0000:0000:0000:0211:22ff:fe33:4455"
SECRET = Secret(b"a test secret of more than thirty-two characters")


# -- key exchange ------------------------------------------------------------------------


def test_key_exchange_messages_round_trip():
    qp = QpInfo(qp_num=0x1234, psn=0xABCDE, lid=7, gid=GID, mtu=3)
    region = RegionInfo(addr=0x7F00_0000_1000, rkey=0xDEADBEEF, length=1 << 30, slot_bytes=(4 << 20) + 4096)
    assert QpInfo.decode(qp.encode()) == qp
    assert RegionInfo.decode(region.encode()) == region


@pytest.mark.parametrize("change", [
    {"qp_num": 1 << 24}, {"psn": -1}, {"lid": 1 << 16}, {"mtu": 0}, {"mtu": 6}, {"qp_num": "7"},
    {"gid": "fe80::1"}, {"gid": GID.upper()}, {"psn": True},
])
def test_malformed_queue_pair_info_is_rejected(change):
    good = QpInfo(qp_num=1, psn=2, lid=3, gid=GID, mtu=3).encode()
    with pytest.raises(KeyExchangeError):
        QpInfo.decode({**good, **change})


@pytest.mark.parametrize("data", [
    None, [1, 2], {"addr": 1, "rkey": 2, "length": 100},
    {"addr": 1, "rkey": 1 << 32, "length": 100, "slot_bytes": 10},
    {"addr": 1, "rkey": 2, "length": 5, "slot_bytes": 10},
    {"addr": (1 << 64) - 10, "rkey": 2, "length": 100, "slot_bytes": 10},
])
def test_malformed_region_info_is_rejected(data):
    with pytest.raises(KeyExchangeError):
        RegionInfo.decode(data)


# -- buffer pool ---------------------------------------------------------------------------


def test_the_pool_lends_disjoint_chunks_and_waits_when_all_are_out():
    pool = BufferPool(mmap.mmap(-1, 4 * 4096 + 100), 4096)
    assert pool.available == 4
    with pool.borrow(1) as a, pool.borrow(1) as b, pool.borrow(1) as c, pool.borrow(1) as d:
        offsets = sorted(chunk.offset for chunk in (a, b, c, d))
        assert offsets == [0, 4096, 8192, 12288] and len(a.view) == 4096
        started = time.monotonic()
        with pytest.raises(PoolExhausted):
            with pool.borrow(0.1):
                pass
        assert time.monotonic() - started >= 0.1
    assert pool.available == 4


def test_a_returned_chunk_wakes_a_waiting_borrower():
    pool = BufferPool(bytearray(4096), 4096)
    got = []
    with pool.borrow(1):
        waiter = threading.Thread(target=lambda: got.append(pool.borrow(2).__enter__().index))
        waiter.start()
        time.sleep(0.05)
        assert got == []
    waiter.join()
    assert got == [0]


def test_a_retired_chunk_is_never_lent_again():
    pool = BufferPool(bytearray(2 * 4096), 4096)
    with pool.borrow(1) as chunk:
        chunk.retire()
    assert pool.available == 1
    with pytest.raises(ValueError):
        BufferPool(bytearray(100), 4096)


# -- slots: the server's arena and the client's reader, wired by a fake NIC ----------------------


class FakeServer:
    """A server's registered arena plus a store, with READs done by copying memory."""

    def __init__(self, slots: int = 4, slot_bytes: int = 64 << 10) -> None:
        self.memory = memoryview(bytearray(slots * slot_bytes))
        self.arena = SlotArena(self.memory, slot_bytes)
        self.blocks: dict[int, bytes] = {}
        self.locates = 0
        self.between_reads = None  # a hook run between the READs of one fetch

    def locate(self, block_id: int, timeout: float) -> SlotRef:
        self.locates += 1
        if block_id not in self.blocks:
            raise BlockMissing(block_id)
        return self.arena.locate(block_id, lambda b: (memoryview(self.blocks[b]), checksum(self.blocks[b])))

    def reader(self, pool: BufferPool) -> SlotReader:
        def fetch(reads, chunk, timeout):
            for i, (remote, local, length) in enumerate(reads):
                pool_view = memoryview(pool.memory)
                pool_view[local:local + length] = self.memory[remote:remote + length]
                if i == 1 and self.between_reads:
                    self.between_reads()

        return SlotReader(self.locate, fetch, pool)


@pytest.fixture
def fake():
    server = FakeServer()
    for block_id in range(1, 9):
        server.blocks[block_id] = content(block_id, 1000 * block_id)
    pool = BufferPool(bytearray(2 * (64 << 10)), 64 << 10)
    return server, server.reader(pool)


def test_reads_come_out_of_slots_and_locations_are_remembered(fake):
    server, reader = fake
    for block_id in (1, 2, 3):
        buf = bytearray(1000 * block_id)
        assert reader.read_into(block_id, memoryview(buf), 0, 1.0) == len(buf)
        assert bytes(buf) == server.blocks[block_id]
    part = bytearray(100)
    assert reader.read_into(3, memoryview(part), 2500, 1.0) == 100 and bytes(part) == server.blocks[3][2500:2600]
    assert server.locates == 3  # the range read used the remembered slot
    with pytest.raises(BlockMissing):
        reader.read_into(99, memoryview(bytearray(10)), 0, 1.0)


def test_a_recycled_slot_sends_the_reader_back_to_locate(fake):
    server, reader = fake
    buf = bytearray(1000)
    reader.read_into(1, memoryview(buf), 0, 1.0)
    for block_id in (2, 3, 4, 5):  # four slots: block 1's slot goes to block 5
        server.locate(block_id, 1.0)
    assert reader.read_into(1, memoryview(buf), 0, 1.0) == 1000 and bytes(buf) == server.blocks[1]
    assert server.locates == 6


def test_a_slot_rewritten_during_the_read_is_not_trusted(fake):
    server, reader = fake
    reader.read_into(1, memoryview(bytearray(1000)), 0, 1.0)
    others = iter([2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6])

    def recycle():  # other clients' locates take every slot between the data READ and the last header READ
        for _ in range(4):
            server.locate(next(others), 1.0)

    server.between_reads = recycle
    buf = bytearray(1000)
    with pytest.raises(SlotChurn):  # each attempt saw its slot change: mixed bytes are never returned
        reader.read_into(1, memoryview(buf), 0, 1.0)
    server.between_reads = None
    assert reader.read_into(1, memoryview(buf), 0, 1.0) == 1000 and bytes(buf) == server.blocks[1]


def test_a_slot_caught_half_written_is_not_trusted(fake):
    server, reader = fake
    ref = server.locate(1, 1.0)
    magic, gen, block_id, length, block_sum = HEADER.unpack_from(server.memory, ref.offset)
    HEADER.pack_into(server.memory, ref.offset, magic, gen + 1, block_id, length, block_sum)  # odd: being rewritten
    with pytest.raises(SlotChurn):
        reader.read_into(1, memoryview(bytearray(1000)), 0, 1.0)
    HEADER.pack_into(server.memory, ref.offset, magic, gen + 2, block_id, length, block_sum)
    buf = bytearray(1000)
    assert reader.read_into(1, memoryview(buf), 0, 1.0) == 1000 and bytes(buf) == server.blocks[1]


def test_bytes_that_fail_the_checksum_are_not_returned(fake):
    server, reader = fake
    reader.read_into(2, memoryview(bytearray(2000)), 0, 1.0)
    ref = server.arena.locate(2, lambda b: (_ for _ in ()).throw(AssertionError("resident")))
    server.memory[ref.offset + HEADER.size + 10] ^= 0xFF
    buf = bytearray(2000)
    with pytest.raises(CorruptBlock):
        reader.read_into(2, memoryview(buf), 0, 1.0)
    assert bytes(buf) == bytes(2000)


def test_blocks_larger_than_a_slot_are_refused_by_the_arena(fake):
    server, reader = fake
    server.blocks[50] = content(50, 64 << 10)
    with pytest.raises(SlotTooSmall):
        reader.read_into(50, memoryview(bytearray(64 << 10)), 0, 1.0)


def test_a_forgotten_block_is_not_served_from_its_old_slot(fake):
    server, reader = fake
    reader.read_into(3, memoryview(bytearray(3000)), 0, 1.0)
    server.arena.forget(3)
    del server.blocks[3]
    with pytest.raises(BlockMissing):
        reader.read_into(3, memoryview(bytearray(3000)), 0, 1.0)


# -- selection -----------------------------------------------------------------------------


def no_device(_: str | None) -> Probe:
    return Probe(None, "no RDMA device (test)")


def a_device(_: str | None) -> Probe:
    return Probe("mlx5_0", "RDMA device mlx5_0")


def test_auto_picks_tcp_without_a_device_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="aifs.rdma.select"):
        transport = select_transport("auto", probe=no_device, secret=SECRET)
    assert isinstance(transport, TcpTransport)
    assert "using tcp (no RDMA device (test))" in caplog.text


def test_auto_picks_verbs_with_a_device(caplog):
    with caplog.at_level(logging.INFO, logger="aifs.rdma.select"):
        transport = select_transport("auto", probe=a_device, secret=SECRET)
    assert isinstance(transport, VerbsTransport) and transport.device == "mlx5_0"
    assert "using verbs (RDMA device mlx5_0)" in caplog.text


def test_explicit_choices():
    assert choose("tcp", probe=a_device).kind == "tcp"
    assert choose("verbs", probe=a_device).device == "mlx5_0"
    with pytest.raises(TransportUnavailable, match="no RDMA device"):
        choose("verbs", probe=no_device)
    with pytest.raises(ValueError):
        choose("infiniband")


# -- pyverbs detection ---------------------------------------------------------------------------


class FakeRDMAError(Exception):
    pass


def fake_pyverbs(devices=None, error=None):
    def get_device_list():
        if error:
            raise error
        return devices

    return SimpleNamespace(device=SimpleNamespace(get_device_list=get_device_list),
                           pyverbs_error=SimpleNamespace(PyverbsError=FakeRDMAError))


def test_probe_without_pyverbs_without_a_device_and_with_devices():
    assert probe_verbs(loader=lambda: None).device is None
    missing = probe_verbs(loader=lambda: fake_pyverbs(error=FakeRDMAError("Failed to get devices list")))
    assert missing.device is None and "Failed to get devices list" in missing.reason
    assert probe_verbs(loader=lambda: fake_pyverbs(devices=[])).device is None
    devices = [SimpleNamespace(name=b"mlx5_0"), SimpleNamespace(name=b"mlx5_1")]
    assert probe_verbs(loader=lambda: fake_pyverbs(devices)).device == "mlx5_0"
    assert probe_verbs("mlx5_1", loader=lambda: fake_pyverbs(devices)).device == "mlx5_1"
    assert probe_verbs("mlx5_9", loader=lambda: fake_pyverbs(devices)).device is None


def test_without_pyverbs_everything_imports_and_auto_means_tcp():
    """In a fresh process where pyverbs cannot be imported from anywhere."""
    script = (
        "import sys, pathlib; sys.modules['pyverbs'] = None\n"
        "from aifs.rdma import device; device.DEBIAN_DIST = pathlib.Path('/nonexistent')\n"
        "import aifs.flash.tier, aifs.flash.server, aifs.rdma.verbs, aifs.rdma.verbs_server\n"
        "from aifs.rdma.select import select_transport\n"
        "from aifs.rdma.auth import Secret\n"
        "transport = select_transport('auto', secret=Secret(b'x' * 32))\n"
        "print(device.probe_verbs().reason, type(transport).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pyverbs is not importable (Debian package python3-pyverbs) TcpTransport"


def test_this_machine_as_it_is():
    """Whatever this machine has, detection answers instead of raising; with pyverbs, the API names used exist."""
    probe = probe_verbs()
    assert probe.reason
    if load_pyverbs() is None:
        pytest.skip("pyverbs is not installed here (Debian package python3-pyverbs)")
    from aifs.rdma.verbs import _verbs

    v = _verbs()
    for name in ("IBV_QPT_RC", "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_READ", "IBV_WR_RDMA_READ",
                 "IBV_SEND_SIGNALED", "IBV_WC_SUCCESS", "IBV_QPS_ERR", "IBV_QP_STATE"):
        assert isinstance(getattr(v.e, name), int), name
    for cls, attrs in ((v.QP, ("to_rts", "post_send", "modify", "qp_num")), (v.CQ, ("poll",)),
                       (v.SendWR, ("set_wr_rdma",)), (v.MR, ("lkey", "rkey"))):
        assert all(hasattr(cls, a) for a in attrs), cls
    attr = v.QPAttr(port_num=1)
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
    gid = v.GID()
    gid.gid = GID
    v.AHAttr(port_num=1, is_global=1, gr=v.GlobalRoute(dgid=gid, sgid_index=0), dlid=3)
