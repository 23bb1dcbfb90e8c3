"""A block server whose segment has a damaged record header: the records after it survive
a restart, the damaged one is dropped (the server is a cache) and the log says so."""

from __future__ import annotations

import pytest

from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address, BlockMissing
from aifs.tiers.records import HEADER

from .blocks import content, find_on_disk, flip_byte

KB = 1024
SUM_BYTES = 8  # each record: the block's checksum, then its bytes


def header_of(root, data: bytes) -> tuple[str, int]:
    """(segment file, offset) of the header of the record holding `data`."""
    path, offset = find_on_disk(root, data)
    return path, offset - SUM_BYTES - HEADER.size


@pytest.mark.timeout_s(60)
def test_records_after_a_damaged_header_survive_a_restart(flash_servers):
    (server,) = flash_servers(1, capacity="64MiB")
    conn = TcpConnection(Address.parse(server.address), timeout=5.0, secret=server.secret)
    for block_id in range(1, 6):
        conn.write(block_id, content(block_id, 100 * KB))
    conn.close()
    path, offset = header_of(server.root, content(2, 100 * KB))
    server.kill()
    flip_byte(path, offset + 1)  # in the magic of block 2's header
    server.start()

    conn = TcpConnection(Address.parse(server.address), timeout=5.0, secret=server.secret)
    for block_id in (1, 3, 4, 5):
        assert conn.read(block_id) == content(block_id, 100 * KB), f"block {block_id} was lost"
    with pytest.raises(BlockMissing):
        conn.read(2)
    assert conn.stat().blocks == 4
    conn.close()
    assert "damaged segment bytes" in server.log.read_text()
