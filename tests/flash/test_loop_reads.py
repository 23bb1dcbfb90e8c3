"""Ranged reads on the trio loop (TCP): the reader alone, and through the tier with failing servers.

Real block server processes; every read's bytes are compared with what was stored.
"""

from __future__ import annotations

import signal
import time

import pytest
import trio

from aifs.flash.tier import RemoteFlashTier
from aifs.rdma.loop_tcp import LoopTcpReader
from aifs.rdma.transport import Address, BlockMissing, TransportError

from .blocks import content
from .test_tier import direct, tier_over

KB = 1024
BLOCK = 256 * KB


def store(server, block_ids) -> None:
    conn = direct(server)
    try:
        for block_id in block_ids:
            conn.write(block_id, content(block_id, BLOCK))
    finally:
        conn.close()


async def read(reader: LoopTcpReader, block_id: int, offset: int, length: int, timeout: float = 5.0) -> bytes:
    buf = bytearray(length)
    n = await reader.read_into(block_id, buf, offset, timeout)
    return bytes(buf[:n])


def test_ranges_come_back_exact_and_a_missing_block_is_a_miss(flash_servers):
    (server,) = flash_servers(1)
    store(server, [1, 2])

    async def main() -> None:
        reader = LoopTcpReader(Address.parse(server.address), server.secret)
        try:
            await reader.open(2, 5.0)
            for block_id, offset, length in [(1, 0, 4 * KB), (2, 100, 64 * KB), (1, BLOCK - 10, 64 * KB)]:
                expected = content(block_id, BLOCK)[offset:offset + length]
                assert await read(reader, block_id, offset, length) == expected
            with pytest.raises(BlockMissing):
                await read(reader, 99, 0, 4 * KB)
            assert await read(reader, 2, 0, 8) == content(2, BLOCK)[:8], "a miss leaves the socket usable"
        finally:
            reader.close()

    trio.run(main)


def test_a_frozen_server_times_out_and_a_restarted_one_is_reached_again(flash_servers):
    (server,) = flash_servers(1)
    store(server, [5])

    async def main() -> None:
        reader = LoopTcpReader(Address.parse(server.address), server.secret)
        try:
            assert await read(reader, 5, 0, KB) == content(5, BLOCK)[:KB]
            server.signal(signal.SIGSTOP)
            started = trio.current_time()
            with pytest.raises(TransportError, match="did not answer"):
                await read(reader, 5, 0, KB, timeout=0.3)
            assert trio.current_time() - started < 1.0
            server.signal(signal.SIGCONT)
            assert await read(reader, 5, KB, KB) == content(5, BLOCK)[KB:2 * KB]
            server.restart()  # its sockets are gone: the idle one is seen closed and a new one opened
            assert await read(reader, 5, 0, KB) == content(5, BLOCK)[:KB]
        finally:
            server.signal(signal.SIGCONT)
            reader.close()

    trio.run(main)


def test_loop_reads_go_around_a_killed_and_a_frozen_server(flash_servers):
    """Replicas in ring order with the tier's retries and breakers: wrong bytes never, a wait
    never longer than the bound on each bad server, both marked down, both back later."""
    servers = flash_servers(4)
    bound = 0.6
    tier = tier_over(servers, replicas=3, timeout=0.25, read_bound=bound)
    ids = list(range(1, 33))
    for block_id in ids:
        tier.put(block_id, content(block_id, BLOCK))
    dead, frozen = servers[0], servers[1]
    assert tier.ranges_on_loop

    async def read_all() -> float:
        slowest = 0.0
        for block_id in ids:
            started = time.monotonic()
            got = await tier.get_range_on_loop(block_id, 64 * KB, 4 * KB)
            slowest = max(slowest, time.monotonic() - started)
            assert got == content(block_id, BLOCK)[64 * KB:68 * KB]
        return slowest

    def up(server) -> bool:
        return {s["server"]: s["up"] for s in tier.status()}[server.address]

    async def main() -> None:
        await tier.open_on_loop()
        await read_all()
        dead.kill()
        frozen.signal(signal.SIGSTOP)
        assert await read_all() <= 2 * bound + 0.3
        assert not up(dead) and not up(frozen)
        dead.start()
        frozen.signal(signal.SIGCONT)
        with trio.fail_after(5):
            while not (up(dead) and up(frozen)):
                await trio.sleep(0.05)
        await read_all()
        tier.close_on_loop()

    try:
        trio.run(main)
    finally:
        frozen.signal(signal.SIGCONT)
        tier.close()


def test_erasure_coded_tiers_keep_ranged_reads_on_threads(flash_servers):
    servers = flash_servers(3)
    tier = RemoteFlashTier([s.address for s in servers], transport="tcp", erasure=(2, 1), secret=servers[0].secret)
    try:
        assert not tier.ranges_on_loop
    finally:
        tier.close()
