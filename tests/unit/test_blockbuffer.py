"""Block buffers keep large writes as pieces and reuse memory between blocks: whatever the
write pattern, the bytes are exactly what was written, and no byte of an earlier block
shows through."""

import os

from aifs.vfs.blockbuffer import SMALL_BYTES, BlockBuffer, BufferPool

BS = 1 << 20
PIECE = BS // 4


def stale_pool() -> BufferPool:
    """A pool whose only idle buffer is full of 0xEE, as an earlier block would leave it."""
    pool = BufferPool(BS)
    pool.give(bytearray(b"\xee" * BS))
    return pool


def content(buf: BlockBuffer) -> bytes:
    return b"".join(buf.parts())


def mutable(data: bytes) -> memoryview:
    """A write whose bytes may change later: it must be copied, never kept as a piece."""
    return memoryview(bytearray(data))


def test_small_buffers_stay_private_and_exact():
    buf = BlockBuffer(stale_pool(), b"abc")
    buf.write(10, memoryview(b"xyz"))
    assert buf.private and not buf.pooled
    assert content(buf) == b"abc" + bytes(7) + b"xyz"
    assert len(buf.data) == len(buf) == 13


def test_large_writes_front_to_back_are_kept_as_pieces_without_a_copy():
    writes = [os.urandom(PIECE) for _ in range(4)]
    buf = BlockBuffer(stale_pool())
    for i, data in enumerate(writes):
        buf.write(i * PIECE, memoryview(data))
    assert not buf.private and not buf.pooled
    assert [part.obj for part in buf.parts()] == writes, "the write requests' own bytes"
    assert buf.copy(PIECE - 3, PIECE + 3) == writes[0][-3:] + writes[1][:3]
    assert content(buf) == b"".join(writes)


def test_any_other_write_gathers_the_pieces_first():
    first, second = os.urandom(PIECE), os.urandom(PIECE)
    buf = BlockBuffer(stale_pool())
    buf.write(0, memoryview(first))
    buf.write(PIECE, memoryview(second))
    buf.write(10, memoryview(b"over"))  # an overwrite inside
    assert buf.pooled and not buf.pieces
    expected = bytearray(first + second)
    expected[10:14] = b"over"
    assert content(buf) == bytes(expected)


def test_truncating_pieces_keeps_the_front():
    data = os.urandom(2 * PIECE)
    buf = BlockBuffer(stale_pool())
    buf.write(0, memoryview(data[:PIECE]))
    buf.write(PIECE, memoryview(data[PIECE:]))
    buf.truncate(PIECE + 5)
    assert content(buf) == data[:PIECE + 5]
    buf.write(PIECE + 100, memoryview(b"z"))
    assert content(buf) == data[:PIECE + 5] + bytes(95) + b"z"


def test_growing_past_small_moves_into_pooled_memory_keeping_the_bytes():
    head = os.urandom(1000)
    buf = BlockBuffer(stale_pool(), head)
    buf.write(SMALL_BYTES, memoryview(b"tail"))
    assert buf.pooled
    expected = head + bytes(SMALL_BYTES - len(head)) + b"tail"
    assert content(buf) == expected, "the gap is zeros, not the pool's stale bytes"


def test_truncate_then_extend_zero_fills_the_cut():
    buf = BlockBuffer(stale_pool())
    buf.write(0, mutable(b"\x01" * (SMALL_BYTES + 10)))
    assert buf.pooled
    buf.truncate(5)
    buf.write(100, memoryview(b"z"))
    assert content(buf) == b"\x01" * 5 + bytes(95) + b"z"
    assert buf.copy(3, 200) == b"\x01\x01" + bytes(95) + b"z"


def test_release_returns_pooled_memory_and_the_pool_is_bounded():
    pool = BufferPool(BS, keep_bytes=2 * BS)
    buffers = [BlockBuffer(pool) for _ in range(3)]
    for buf in buffers:
        buf.write(0, mutable(bytes(SMALL_BYTES + 1)))
    memory = [buf.data for buf in buffers]
    for buf in buffers:
        buf.release()
        assert len(buf) == 0 and not buf.pooled
    assert pool.take() is memory[1] and pool.take() is memory[0], "two kept, last given first out"
    fresh = pool.take()
    assert all(fresh is not m for m in memory), "the third was dropped: the pool holds at most keep_bytes"


def test_a_write_never_larger_than_a_block_goes_past_the_pool():
    pool = BufferPool(BS)
    buf = BlockBuffer(pool)
    buf.write(0, mutable(b"q" * BS))
    assert buf.pooled and len(buf) == BS and len(buf.data) == BS
