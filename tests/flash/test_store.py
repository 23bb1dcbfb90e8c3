"""The block server's store on its own: budget, LRU among unpinned blocks, checksums, restarts."""

from __future__ import annotations

import os
import time

import pytest
from helpers import cached_pages

from aifs.flash.store import BlockStore, ChecksumMismatch, CorruptRecord, Record, StoreFull, SUM
from aifs.tiers.checksum import checksum

from .blocks import content, find_on_disk, flip_byte

KB = 1024
RECORD = 10 * KB + SUM.size  # what one 10 KiB block costs against the budget


def put(store: BlockStore, block_id: int, size: int = 10 * KB, pin: bool = False) -> bytes:
    data = content(block_id, size)
    record = Record(len(data))
    record.payload[:] = data
    store.put(block_id, record, checksum(data), pin)
    return data


def held(store: BlockStore) -> set[int]:
    return {b for b in range(100) if store.contains(b)}


def test_put_read_ranges_and_sizes(tmp_path):
    store = BlockStore(tmp_path, 1 << 20)
    data = put(store, 1)
    got, size, block_sum = store.read(1)
    assert bytes(got) == data and size == len(data) and block_sum == checksum(data)
    assert bytes(store.read(1, 100, 50)[0]) == data[100:150]
    assert bytes(store.read(1, len(data) - 5, 50)[0]) == data[-5:]
    assert store.size(1) == RECORD and store.size(2) == 0
    with pytest.raises(KeyError):
        store.read(2)


def test_a_put_with_a_wrong_checksum_is_refused(tmp_path):
    store = BlockStore(tmp_path, 1 << 20)
    record = Record(3)
    record.payload[:] = b"abc"
    with pytest.raises(ChecksumMismatch):
        store.put(1, record, checksum(b"abd"))
    assert not store.contains(1) and store.stat()["used"] == 0


def test_the_least_recently_used_block_is_evicted_first(tmp_path):
    store = BlockStore(tmp_path, 4 * RECORD)
    for block_id in range(4):
        put(store, block_id)
    store.read(0)  # 0 is now the most recently used; 1 is the oldest
    put(store, 4)
    assert held(store) == {0, 2, 3, 4}
    put(store, 5)
    assert held(store) == {0, 3, 4, 5}
    assert store.stat()["used"] == 4 * RECORD <= store.capacity


def test_pinned_blocks_are_never_evicted(tmp_path):
    store = BlockStore(tmp_path, 3 * RECORD)
    put(store, 0, pin=True)
    put(store, 1, pin=True)
    for block_id in range(2, 10):
        put(store, block_id)
    assert held(store) == {0, 1, 9}
    put(store, 10, pin=True)  # takes the last unpinned block's room
    assert held(store) == {0, 1, 10}
    with pytest.raises(StoreFull):
        put(store, 11)
    store.unpin(0)
    put(store, 11)
    assert held(store) == {1, 10, 11}


def test_index_pins_and_checksums_survive_a_restart(tmp_path):
    store = BlockStore(tmp_path, 10 * RECORD)
    blocks = {block_id: put(store, block_id, pin=block_id < 2) for block_id in range(5)}
    store.delete(4)
    store.close()
    store = BlockStore(tmp_path, 3 * RECORD)  # a smaller budget: unpinned blocks make room
    assert store.stat()["pinned"] == 2 and {0, 1} <= held(store) and len(held(store)) == 3
    for block_id in held(store):
        assert bytes(store.read(block_id)[0]) == blocks[block_id]


def test_a_record_torn_by_a_crash_is_dropped_at_start(tmp_path):
    store = BlockStore(tmp_path, 1 << 20)
    put(store, 1)
    data = put(store, 2)
    store.close()
    path, offset = find_on_disk(tmp_path, data)
    with open(path, "r+b") as f:
        f.truncate(offset + 100)
    store = BlockStore(tmp_path, 1 << 20)
    assert held(store) == {1} and store.stat()["used"] == RECORD


def test_a_rotten_record_is_dropped_not_served(tmp_path):
    store = BlockStore(tmp_path, 1 << 20)
    data = put(store, 1)
    path, offset = find_on_disk(tmp_path, data)
    flip_byte(path, offset + 5)
    with pytest.raises(CorruptRecord):
        store.read(1)
    assert not store.contains(1) and store.stat()["used"] == 0


def test_a_range_is_read_alone_and_left_to_the_client_to_check(tmp_path):
    """Small reads must not cost a whole-block read and hash; the client checks the range
    against its chunk checksums, and a whole read still catches the rot."""
    store = BlockStore(tmp_path, 1 << 20)
    data = put(store, 1)
    path, offset = find_on_disk(tmp_path, data)
    flip_byte(path, offset + 5)
    got, size, block_sum = store.read(1, 100, 50)
    assert bytes(got) == data[100:150] and size == len(data) and block_sum is None
    assert bytes(store.read(1, 0, 10)[0])[5] != data[5], "served as stored: the client decides"
    with pytest.raises(CorruptRecord):
        store.read(1)


EVICTION_TRIES = 100


def evict(root) -> bool:
    """Drop the store's segments from the page cache, as a server long idle or short of RAM. The
    kernel keeps pages it is busy with (writeback, another reader) on a loaded machine: ask again
    until none of the file is cached; False if some stayed."""
    for path in root.rglob("seg-*.log"):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
            for _ in range(100):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                if cached_pages(f.fileno()) == 0:
                    break
                time.sleep(0.01)
            else:
                return False
    return True


def missed_after_eviction(root, read) -> bool | None:
    """Does `read` answer None once the pages are gone? A read that may not wait still starts
    the kernel's own read of the pages, and a fast disk can finish it before the kernel looks
    again, so one answer is not proof. On a loaded machine most such reads can finish in
    time: ask up to EVICTION_TRIES times. None: the kernel never let go of the pages, so
    nothing was asked."""
    evicted = False
    for _ in range(EVICTION_TRIES):
        if not evict(root):
            continue
        evicted = True
        if read() is None:
            return True
    return False if evicted else None


def plain_reads_miss(root) -> bool:
    """Does this file system ever refuse a non-blocking read of evicted pages? Some (network
    and virtual ones, or a disk whose reads complete inline) always answer from the disk, and
    then nothing here can be a miss."""
    probe = root / "seg-probe.log"
    probe.write_bytes(os.urandom(1 << 20))

    def read() -> bytes | None:
        with open(probe, "rb") as f:
            try:
                return os.preadv(f.fileno(), [bytearray(50)], 100, os.RWF_NOWAIT)
            except BlockingIOError:
                return None

    try:
        return missed_after_eviction(root, read) is True
    finally:
        probe.unlink()


def assert_misses(root, read) -> None:
    missed = missed_after_eviction(root, read)
    if missed is None:
        pytest.skip("the kernel kept the segments' pages in memory however often it was asked to drop them")
    if not missed:
        if not plain_reads_miss(root):
            pytest.skip(f"the file system under {root} answers non-blocking reads from the disk")
        raise AssertionError("a read of evicted pages was answered from the page-cache-only path")


def test_cached_reads_answer_from_memory_only(tmp_path):
    """The event loop serves what the page cache holds; a read that needs the disk is None (left
    to a thread), and a rotten whole block is caught on this path too."""
    store = BlockStore(tmp_path, 1 << 20)
    data = put(store, 1)
    assert bytes(store.read_cached(1, 100, 50)[0]) == data[100:150]
    got, size, block_sum = store.read_cached(1)
    assert bytes(got) == data and size == len(data) and block_sum == checksum(data)
    assert_misses(tmp_path, lambda: store.read_cached(1, 100, 50))
    assert_misses(tmp_path, lambda: store.read_cached(1))
    assert bytes(store.read(1, 100, 50)[0]) == data[100:150]  # the disk read a thread would do
    path, offset = find_on_disk(tmp_path, data)
    flip_byte(path, offset + 5)
    with open(path, "rb") as f:
        f.read()  # the whole segment in the page cache again
    with pytest.raises(CorruptRecord):
        store.read_cached(1)
    with pytest.raises(KeyError):
        store.read_cached(2)
