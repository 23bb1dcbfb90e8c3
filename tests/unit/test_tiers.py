"""The tiers: RAM (segmented LRU), NVMe (staging + cache), the local object store,
and TierManager's read path, single-flight fetches and write-back steps."""

import contextlib
import errno
import os
import threading
import pytest
import trio

from aifs.errors import FsError
from aifs.tiers import files as tier_files
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import INLINE_BYTES
from aifs.tiers.nvme import NvmeTier, StagingFull
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.protocol import object_name
from aifs.tiers.ram import RamTier

from .conftest import BIG, block, fs_error, in_cold_only, trio_test

KB = 1024


# -- RAM -------------------------------------------------------------------------


def test_ram_put_get_delete():
    ram = RamTier(10 * KB)
    ram.put(1, block(1))
    assert ram.get(1) == block(1) and ram.contains(1) and ram.used() == KB
    assert ram.get(2) is None
    ram.delete(1)
    assert ram.get(1) is None and not ram.contains(1) and ram.used() == 0
    ram.delete(1)


def test_ram_never_exceeds_its_budget():
    ram = RamTier(10 * KB)
    for i in range(100):
        ram.put(i, block(i, KB * (1 + i % 3)))
        if i % 4 == 0:
            ram.get(i // 2)
        assert ram.used() <= 10 * KB
    assert ram.used() > 5 * KB
    held = [i for i in range(100) if ram.contains(i)]
    assert ram.used() == sum(KB * (1 + i % 3) for i in held)


def test_ram_ignores_block_larger_than_budget():
    ram = RamTier(4 * KB)
    ram.put(1, block(1))
    ram.put(2, block(2, 5 * KB))
    assert not ram.contains(2) and ram.contains(1)


def test_ram_evicts_least_recently_used_first():
    ram = RamTier(4 * KB)
    for i in range(4):
        ram.put(i, block(i))
    ram.put(4, block(4))
    assert [i for i in range(5) if ram.contains(i)] == [1, 2, 3, 4]


def test_ram_hot_set_survives_a_scan_larger_than_budget():
    ram = RamTier(16 * KB)
    hot = range(1000, 1004)
    for i in hot:
        ram.put(i, block(i))
    for _ in range(3):
        for i in hot:
            assert ram.get(i) == block(i)
    for i in range(64):  # one pass, four times the budget
        ram.put(i, block(i))
        assert ram.used() <= 16 * KB
    assert all(ram.contains(i) for i in hot)
    assert ram.contains(63), "the scan still gets the rest of the cache"


def test_ram_release_lets_go_of_a_block_read_once_only():
    ram = RamTier(16 * KB)
    for i in range(3):
        ram.put(i, block(i))
    assert ram.get(1) == block(1)  # re-used: protected
    ram.pin([2])
    for i in range(3):
        ram.release(i)
    assert [i for i in range(3) if ram.contains(i)] == [1, 2]
    assert ram.used() == 2 * len(block(0))


def test_ram_protected_segment_is_bounded():
    ram = RamTier(10 * KB)
    for i in range(10):
        ram.put(i, block(i))
        ram.get(i)
    for i in range(100, 104):
        ram.put(i, block(i))
    assert ram.used() <= 10 * KB
    assert ram.contains(103), "new blocks still find room next to a full protected segment"


# -- NVMe ------------------------------------------------------------------------


@pytest.fixture
def nvme_at(tmp_path):
    """Open (or reopen) the NVMe tier in one folder; every instance is closed at teardown."""
    opened: list[NvmeTier] = []

    def open_(blocks: int = 100) -> NvmeTier:
        opened.append(NvmeTier(tmp_path / "nvme", blocks * KB))
        return opened[-1]

    yield open_
    for tier in opened:
        tier.close()


def held(tier, ids) -> list[int]:
    return [i for i in ids if tier.contains(i)]


def test_nvme_put_get_delete(nvme_at):
    nvme = nvme_at()
    nvme.put(0x1234, block(1))
    nvme.put(0x1234, block(2))  # an id names the same bytes forever: a second put is a no-op
    assert nvme.get(0x1234) == block(1)
    assert nvme.contains(0x1234) and nvme.used() == KB and nvme.get(7) is None
    nvme.put(5, b"")
    assert nvme.get(5) == b""
    nvme.delete(0x1234)
    nvme.delete(0x1234)
    assert nvme.get(0x1234) is None and nvme.used() == 0 and not nvme.contains(0x1234)


def _slow_appends(monkeypatch, nvme, started: threading.Event, release: threading.Event) -> None:
    """Appends to `nvme` wait for `release`, as a write to a busy disk does."""
    append_run = nvme._log.append_run

    def slow(*args, **kwargs):
        started.set()
        assert release.wait(10)
        return append_run(*args, **kwargs)

    monkeypatch.setattr(nvme._log, "append_run", slow)


def test_nvme_reads_do_not_wait_for_an_append(nvme_at, monkeypatch):
    nvme = nvme_at()
    nvme.put(1, block(1))
    started, release = threading.Event(), threading.Event()
    _slow_appends(monkeypatch, nvme, started, release)
    writer = threading.Thread(target=nvme.put, args=(2, block(2)))
    writer.start()
    assert started.wait(10)
    assert nvme.get(1) == block(1) and not nvme.contains(2)
    assert nvme.used() == 2 * KB, "the block being written has its room reserved"
    release.set()
    writer.join()
    assert nvme.get(2) == block(2) and nvme.used() == 2 * KB


def test_nvme_block_deleted_while_being_written_is_not_kept(nvme_at, monkeypatch):
    nvme = nvme_at()
    started, release = threading.Event(), threading.Event()
    _slow_appends(monkeypatch, nvme, started, release)
    writer = threading.Thread(target=nvme.put, args=(3, block(3), True))
    writer.start()
    assert started.wait(10)
    nvme.delete(3)
    release.set()
    writer.join()
    assert not nvme.contains(3) and nvme.used() == 0 and nvme.dirty_bytes() == 0
    nvme.close()
    assert not held(nvme_at(), [3]), "the record of a deleted block came back after a restart"


def test_nvme_evicts_clean_blocks_lru(nvme_at):
    nvme = nvme_at(3)
    for i in (1, 2, 3):
        nvme.put(i, block(i))
    nvme.get(1)
    nvme.put(4, block(4))
    assert held(nvme, range(1, 5)) == [1, 3, 4]
    assert nvme.used() == 3 * KB


def test_nvme_never_evicts_dirty_blocks(nvme_at):
    nvme = nvme_at(3)
    nvme.put(1, block(1), dirty=True)
    nvme.put(2, block(2))
    nvme.put(3, block(3), dirty=True)
    nvme.put(4, block(4))
    nvme.put(5, block(5))
    assert held(nvme, range(1, 6)) == [1, 3, 5]
    assert nvme.is_dirty(1) and nvme.is_dirty(3) and not nvme.is_dirty(5)
    assert nvme.dirty_bytes() == 2 * KB


def test_nvme_staging_full_when_only_dirty_blocks_remain(nvme_at):
    nvme = nvme_at(3)
    for i in (1, 2):
        nvme.put(i, block(i), dirty=True)
    nvme.put(3, block(3))
    nvme.put(4, block(4), dirty=True)  # evicts clean 3
    assert held(nvme, range(1, 5)) == [1, 2, 4]
    with pytest.raises(StagingFull):
        nvme.put(5, block(5), dirty=True)
    nvme.put(6, block(6))  # a clean block that finds no room is just not cached
    assert held(nvme, range(1, 7)) == [1, 2, 4] and nvme.used() == 3 * KB
    nvme.mark_clean(2)
    nvme.put(5, block(5), dirty=True)
    assert held(nvme, range(1, 7)) == [1, 4, 5]


def test_nvme_mark_dirty_pins_a_clean_block(nvme_at):
    nvme = nvme_at(2)
    nvme.put(1, block(1))
    nvme.put(2, block(2))
    nvme.mark_dirty(1)
    nvme.mark_clean(2)  # was never dirty: stays an ordinary clean block
    nvme.put(3, block(3))
    assert held(nvme, range(1, 4)) == [1, 3]


def test_nvme_recovery_drops_blocks_staged_for_a_commit_that_never_happened(nvme_at):
    """A staged record stays marked staged on disk until its upload is durable; after a crash
    the pending uploads in the metadata tell committed blocks from leftovers of a write the
    daemon never committed."""
    nvme = nvme_at()
    nvme.put(1, block(1), dirty=True)  # committed: its upload is pending
    nvme.put(2, block(2), dirty=True)  # the daemon died before the metadata commit
    nvme.put(3, block(3), dirty=True)
    nvme.mark_clean(3)                 # uploaded: confirmed on disk, then its pending key went
    nvme.put(4, block(4))              # a clean cached copy
    again = nvme_at()
    assert again.recover({1: checksum(block(1))}) == [2]
    assert held(again, range(1, 5)) == [1, 3, 4]
    assert again.is_dirty(1) and not again.is_dirty(3) and not again.is_dirty(4)
    assert nvme_at().recover({1: checksum(block(1))}) == [], "the leftover is gone for good"


def test_nvme_rebuilds_index_on_reopen(nvme_at):
    nvme = nvme_at()
    sizes = {1: 100, 0x101: 4000, 0xFFFF: 1, 7: 50}
    for block_id, size in sizes.items():
        nvme.put(block_id, block(block_id, size), dirty=block_id == 1)
    nvme.delete(7)
    nvme.close()
    again = nvme_at()
    assert held(again, sizes) == [1, 0x101, 0xFFFF], "a deleted block stays deleted"
    assert again.used() == 4101
    assert all(again.get(b) == block(b, sizes[b]) for b in (1, 0x101, 0xFFFF))
    assert again.dirty_bytes() == 0, "which blocks are dirty is told by the metadata"
    again.mark_dirty(1)
    again.mark_dirty(999)  # not held: ignored
    assert again.is_dirty(1) and not again.is_dirty(999)
    again.put(8, block(8))
    again.delete(0x101)
    again.close()
    third = nvme_at()
    assert held(third, (1, 0x101, 0xFFFF, 8)) == [1, 0xFFFF, 8]
    assert third.get(8) == block(8) and third.used() == 100 + 1 + KB


def test_nvme_drops_a_record_torn_by_a_crash(tmp_path, nvme_at):
    nvme = nvme_at()
    nvme.put(1, block(1))
    nvme.put(2, block(2))
    nvme.close()
    (segment,) = (tmp_path / "nvme").iterdir()
    whole = segment.read_bytes()
    record = len(whole) // 2
    segment.write_bytes(whole + whole[record:record + 40])  # a header and a few bytes of data
    again = nvme_at()
    assert held(again, (1, 2)) == [1, 2] and again.used() == 2 * KB
    assert again.get(2) == block(2)
    assert segment.stat().st_size == len(whole)
    again.put(3, block(3))
    again.close()
    assert nvme_at().get(3) == block(3)


def test_nvme_sync_of_staged_blocks(nvme_at):
    nvme = nvme_at()
    nvme.put(1, block(1), dirty=True)
    nvme.sync([1, 2])  # a block that is not held is skipped
    assert nvme.get(1) == block(1)


# -- local object store ------------------------------------------------------------


def test_objstore_put_get_delete_contains_used(tmp_path):
    store = LocalObjectStore(tmp_path / "cold", BIG)
    store.put(5, block(5))
    store.put(5, block(5))
    store.put(0x305, block(6, 10))
    assert store.get(5) == block(5) and store.get(0x305) == block(6, 10)
    assert store.contains(5) and not store.contains(6) and store.get(6) is None
    assert store.used() == KB + 10
    assert sorted(store.block_ids()) == [5, 0x305]
    assert (tmp_path / "cold" / object_name(5)).read_bytes() == block(5)
    store.delete(5)
    store.delete(5)
    assert not store.contains(5) and store.used() == 10 and store.block_ids() == [0x305]


def test_objstore_flush_makes_puts_durable(tmp_path, monkeypatch):
    real_syncfs = tier_files.libc.syncfs
    synced = []

    def recording_syncfs(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_syncfs(fd)

    monkeypatch.setattr(tier_files.libc, "syncfs", recording_syncfs)
    store = LocalObjectStore(tmp_path / "cold", BIG)
    store.put(0x42, block(0x42))
    path = tmp_path / "cold" / object_name(0x42)
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no half object, no temp file"
    store.flush()
    assert synced == [str(tmp_path / "cold")]


def test_objstore_reopen_counts_objects_and_a_retry_rewrites_a_torn_one(tmp_path):
    store = LocalObjectStore(tmp_path / "cold", BIG)
    store.put(1, block(1))
    store.put(2, block(2, 300))
    torn = tmp_path / "cold" / object_name(3)
    torn.write_bytes(block(3)[:100])  # a put cut short by a crash; its upload is still queued
    again = LocalObjectStore(tmp_path / "cold", BIG)
    assert sorted(again.block_ids()) == [1, 2, 3]
    assert again.used() == KB + 300 + 100
    again.put(3, block(3))
    assert again.get(3) == block(3)
    assert again.used() == 2 * KB + 300


# -- TierManager -------------------------------------------------------------------


@pytest.fixture
def tiers(tiers_factory):
    return tiers_factory()


@trio_test
async def test_read_from_ram_first(tiers):
    tiers.ram.put(1, block(1))
    assert await tiers.read(1, checksum(block(1)), KB) == block(1)
    assert tiers.nvme.gets == {} and tiers.cold.gets == {}
    assert tiers.stats["ram"].hits == 1


@trio_test
async def test_read_from_nvme_fills_ram(tiers):
    tiers.nvme.put(2, block(2))
    assert await tiers.read(2, checksum(block(2)), KB) == block(2)
    assert tiers.ram.contains(2) and tiers.cold.gets == {}
    assert await tiers.read(2, checksum(block(2)), KB) == block(2)
    assert tiers.nvme.gets == {2: 1}
    assert tiers.stats["nvme"].hits == 1 and tiers.stats["nvme"].bytes_read == KB


@trio_test
async def test_read_from_cold_fills_nvme_and_ram(tiers):
    expected = in_cold_only(tiers, 3, block(3))
    assert await tiers.read(3, expected, KB) == block(3)
    assert tiers.fills.wait_idle(5), "NVMe's copy is written in the background"
    assert tiers.ram.contains(3) and tiers.nvme.contains(3)
    assert not tiers.nvme.is_dirty(3), "a copy of a cold block is clean"
    tiers.ram.delete(3)
    assert await tiers.read(3, expected, KB) == block(3)
    assert tiers.cold.gets == {3: 1} and tiers.nvme.gets[3] == 1, "NVMe is read only once it holds the block"


@trio_test
async def test_corrupt_nvme_copy_falls_back_to_cold(tiers):
    expected = in_cold_only(tiers, 4, block(4))
    tiers.nvme.put(4, b"rotten" * 100)
    assert await tiers.read(4, expected, KB) == block(4)
    assert tiers.cold.gets == {4: 1}
    assert tiers.fills.wait_idle(5)
    assert tiers.nvme.get(4) == block(4), "the bad NVMe copy is replaced by the good one"


@trio_test
async def test_corrupt_nvme_copy_is_deleted(tiers_factory):
    tiers = tiers_factory(nvme=KB // 2)  # too small to take the good copy back
    expected = in_cold_only(tiers, 4, block(4))
    tiers.nvme.put(4, b"rotten")
    assert await tiers.read(4, expected, KB) == block(4)
    assert not tiers.nvme.contains(4) and tiers.nvme.used() == 0


@trio_test
async def test_corrupt_everywhere_is_eio(tiers):
    tiers.cold.put(5, b"bad cold")
    tiers.nvme.put(5, b"bad nvme")
    with fs_error(errno.EIO):
        await tiers.read(5, checksum(block(5)), KB)
    assert not tiers.ram.contains(5) and not tiers.nvme.contains(5)


@trio_test
async def test_missing_everywhere_is_eio(tiers):
    with fs_error(errno.EIO):
        await tiers.read(6, checksum(block(6)), KB)


BIG_BLOCK = INLINE_BYTES + 4 * KB  # large enough to be read on a worker thread


@trio_test
async def test_concurrent_reads_share_one_fetch(tiers_factory):
    tiers = tiers_factory(cold_delay=0.1)
    data = block(7, BIG_BLOCK)
    expected = in_cold_only(tiers, 7, data)
    results = []

    async def reader():
        results.append(await tiers.read(7, expected, len(data)))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(reader)
    assert results == [data] * 8
    assert tiers.cold.gets == {7: 1}
    assert tiers.nvme.gets.get(7, 0) == 0, "NVMe's index told the miss: no read"


@trio_test
async def test_cancelled_reader_does_not_fail_the_readers_sharing_its_fetch(tiers_factory):
    tiers = tiers_factory(cold_delay=0.2)
    data = block(12, BIG_BLOCK)
    expected = in_cold_only(tiers, 12, data)
    got = []

    async def impatient():  # e.g. a readahead that is called off
        with trio.move_on_after(0.05):
            await tiers.read(12, expected, len(data))

    async def patient():
        await trio.sleep(0.01)  # joins the fetch the impatient reader started
        got.append(await tiers.read(12, expected, len(data)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(impatient)
        nursery.start_soon(patient)
    assert got == [data]


@trio_test
async def test_concurrent_readers_of_a_lost_block_all_get_eio(tiers_factory):
    tiers = tiers_factory(cold_delay=0.05)
    tiers.cold.put(8, b"corrupt" * (BIG_BLOCK // 7))
    errors = []

    async def reader():
        with fs_error(errno.EIO):
            await tiers.read(8, checksum(block(8)), BIG_BLOCK)
        errors.append(True)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(reader)
    assert len(errors) == 4 and tiers.cold.gets == {8: 1}


@trio_test
async def test_stage_upload_durable_delete(tiers):
    data = block(9, 2 * KB)
    await tiers.stage(9, data)
    assert tiers.nvme.is_dirty(9) and tiers.ram.contains(9) and not tiers.cold.contains(9)
    await tiers.sync([9])
    await tiers.upload(9, checksum(data))
    assert tiers.cold.get(9) == data
    assert tiers.nvme.is_dirty(9), "not evictable before the cold copy is durable"
    await tiers.uploads_durable([9])
    assert not tiers.nvme.is_dirty(9)
    await tiers.delete([9])
    assert not any(tier.contains(9) for tier in tiers.tiers)


@trio_test
async def test_a_retired_pinned_block_leaves_the_pin_sets(tiers):
    data = block(14)
    tiers.ram.pin([14])
    tiers.nvme.pin([14])
    await tiers.stage(14, data)
    await tiers.upload(14, checksum(data))
    await tiers.uploads_durable([14])
    await tiers.delete([14])
    assert not tiers.ram.is_pinned(14) and not tiers.nvme.is_pinned(14)
    assert tiers.ram.pinned_bytes() == 0 and tiers.nvme.pinned_bytes() == 0


def rot_on_nvme(tiers, data: bytes) -> None:
    """Flip one byte of `data` where the NVMe tier keeps it on disk (bit rot)."""
    for segment in tiers.nvme.root.glob("seg-*.log"):
        raw = bytearray(segment.read_bytes())
        at = raw.find(data)
        if at >= 0:
            raw[at + len(data) // 2] ^= 0xFF
            segment.write_bytes(raw)
            return
    raise AssertionError("block bytes not found in any NVMe segment")


@trio_test
async def test_upload_never_copies_a_rotten_staged_block_to_the_cold_tier(tiers):
    data = block(13, 4 * KB)
    await tiers.stage(13, data)
    rot_on_nvme(tiers, data)
    with contextlib.suppress(FsError):  # refusing is fine; uploading the rot is not
        await tiers.upload(13, checksum(data))
        await tiers.uploads_durable([13])
    cold = tiers.cold.get(13)
    assert cold is None or checksum(cold) == checksum(data), "the durable copy is the rotten one"


@trio_test
async def test_stage_big_block_through_threads(tiers):
    data = block(10, BIG_BLOCK)
    await tiers.stage(10, data)
    await tiers.upload(10, checksum(data))
    await tiers.uploads_durable([10])
    tiers.ram.delete(10)
    tiers.nvme.delete(10)
    assert await tiers.read(10, checksum(data), len(data)) == data


@trio_test
async def test_upload_of_missing_staged_block_is_eio(tiers):
    with fs_error(errno.EIO):
        await tiers.upload(11, 0)


@trio_test
async def test_stage_into_full_staging_area_waits_then_gives_enospc(tiers_factory):
    tiers = tiers_factory(nvme=2 * KB)
    tiers.dirty_wait = 0.3
    await tiers.stage(1, block(1))
    await tiers.stage(2, block(2))
    started = trio.current_time()
    with fs_error(errno.ENOSPC):
        await tiers.stage(3, block(3))
    assert trio.current_time() - started >= 0.3, "the writer waits for uploads before giving up"


@trio_test
async def test_writer_waiting_for_staging_proceeds_once_an_upload_frees_room(tiers_factory):
    tiers = tiers_factory(nvme=2 * KB)
    await tiers.stage(1, block(1))
    await tiers.stage(2, block(2))

    async def upload_later():
        await trio.sleep(0.2)
        await tiers.upload(1, checksum(block(1)))
        await tiers.uploads_durable([1])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(upload_later)
        await tiers.stage(3, block(3))
    assert tiers.nvme.contains(3) and not tiers.nvme.contains(1)
