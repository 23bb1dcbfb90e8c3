"""Block buffers reuse memory between blocks: no byte of an earlier block may show through."""

import os

from aifs.vfs.blockbuffer import SMALL_BYTES, BlockBuffer, BufferPool

BS = 1 << 20


def stale_pool() -> BufferPool:
    """A pool whose only idle buffer is full of 0xEE, as an earlier block would leave it."""
    pool = BufferPool(BS)
    pool.give(bytearray(b"\xee" * BS))
    return pool


def test_small_buffers_stay_private_and_exact():
    buf = BlockBuffer(stale_pool(), b"abc")
    buf.write(10, memoryview(b"xyz"))
    assert not buf.pooled
    assert bytes(buf.view()) == b"abc" + bytes(7) + b"xyz"
    assert len(buf.data) == len(buf) == 13


def test_growing_past_small_moves_into_pooled_memory_keeping_the_bytes():
    head = os.urandom(1000)
    buf = BlockBuffer(stale_pool(), head)
    buf.write(SMALL_BYTES, memoryview(b"tail"))
    assert buf.pooled
    expected = head + bytes(SMALL_BYTES - len(head)) + b"tail"
    assert bytes(buf.view()) == expected, "the gap is zeros, not the pool's stale bytes"


def test_truncate_then_extend_zero_fills_the_cut():
    buf = BlockBuffer(stale_pool())
    buf.write(0, memoryview(b"\x01" * (SMALL_BYTES + 10)))
    buf.truncate(5)
    buf.write(100, memoryview(b"z"))
    assert bytes(buf.view()) == b"\x01" * 5 + bytes(95) + b"z"
    assert buf.copy(3, 200) == b"\x01\x01" + bytes(95) + b"z"


def test_release_returns_pooled_memory_and_the_pool_is_bounded():
    pool = BufferPool(BS, keep_bytes=2 * BS)
    buffers = [BlockBuffer(pool) for _ in range(3)]
    for buf in buffers:
        buf.write(0, memoryview(bytes(SMALL_BYTES + 1)))
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
    buf.write(0, memoryview(b"q" * BS))
    assert buf.pooled and len(buf) == BS and len(buf.data) == BS
