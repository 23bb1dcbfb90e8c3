"""Prefetcher.warm: every block of a file read broadly is fetched once, a few at a time; and
FileData hands it to the page cache only when the page cache would take a file of its size."""

import trio
import trio.testing

from aifs.meta.attrs import BlockRef
from aifs.tiers.priority import Priority
from aifs.vfs.prefetch import MAX_IN_FLIGHT, WARM_IN_FLIGHT, Prefetcher

from .conftest import BS, noise, trio_test


class CountingTiers:
    """Tiers that hold `held` and take a moment to read anything else, counting the reads
    running at once."""

    def __init__(self, held: set[int]) -> None:
        self.held = held
        self.read_ids: list[int] = []
        self.running = self.most_running = 0
        self.read_done = lambda block_id: None

    def holds(self, tier: str, block_id: int) -> bool:
        return block_id in self.held

    async def read(self, block_id: int, expected: int, length: int, promote: bool, priority: Priority) -> bytes:
        assert priority == Priority.READAHEAD and not promote
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await trio.sleep(0.01)
        self.running -= 1
        self.read_ids.append(block_id)
        self.held.add(block_id)
        self.read_done(block_id)
        return bytes(length)


def refs(ids: range) -> dict[int, BlockRef]:
    """References by block index: block i of the file is object i."""
    return {i: BlockRef(block_id=i, offset=0, length=16, checksum=0) for i in ids}


@trio_test
async def test_warming_fetches_each_block_not_held_once_a_few_at_a_time():
    tiers = CountingTiers(held={3, 7, 30})
    async with trio.open_nursery() as nursery:
        prefetch = Prefetcher(tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        assert prefetch.warm([refs(range(0, 20)), refs(range(20, 40)), refs(range(0, 5))])
    assert sorted(tiers.read_ids) == [i for i in range(40) if i not in (3, 7, 30)]
    assert tiers.most_running == WARM_IN_FLIGHT
    assert prefetch.in_flight == set() and prefetch.blocks == 37


@trio_test
async def test_a_block_already_fetched_ahead_is_not_fetched_again_by_warming():
    tiers = CountingTiers(held=set())
    async with trio.open_nursery() as nursery:
        prefetch = Prefetcher(tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        assert prefetch.fetch(list(refs(range(2)).values())) == ([0, 1], 2)
        await trio.testing.wait_all_tasks_blocked()
        prefetch.warm([refs(range(4))])
    assert sorted(tiers.read_ids) == [0, 1, 2, 3]


@trio_test
async def test_warming_for_the_page_cache_hands_over_every_block_held_or_fetched():
    tiers = CountingTiers(held={1})
    landed = []
    async with trio.open_nursery() as nursery:
        prefetch = Prefetcher(tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        async def land(index: int, ref: BlockRef, data: bytes) -> bool:
            assert ref.block_id not in prefetch.in_flight  # fetched: only its hand-over is left
            assert prefetch.status()["warming_files"] == 1
            landed.append((index, ref.block_id, len(data)))
            return index != 2  # the page cache turned the last one down

        prefetch.warm([refs(range(3))], land)
    assert sorted(landed) == [(0, 0, 16), (1, 1, 16), (2, 2, 16)]
    assert prefetch.status() | {"warmed_files": 1, "warming_files": 0, "page_cache_blocks": 2} == prefetch.status()


@trio_test
async def test_slow_hand_overs_hold_up_fetches_so_few_blocks_wait_in_memory():
    tiers = CountingTiers(held=set())
    holding = most_holding = 0

    async def land(index: int, ref: BlockRef, data: bytes) -> bool:
        nonlocal holding
        await trio.sleep(0.05)  # ten times a fetch
        holding -= 1
        return True

    def read_done(block_id: int) -> None:
        nonlocal holding, most_holding
        holding += 1
        most_holding = max(most_holding, holding)

    tiers.read_done = read_done
    async with trio.open_nursery() as nursery:
        prefetch = Prefetcher(tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        prefetch.warm([refs(range(40))], land)
    assert len(tiers.read_ids) == 40 and holding == 0
    assert most_holding == 2 * WARM_IN_FLIGHT


@trio_test
async def test_blocks_being_handed_over_leave_readahead_of_other_files_its_slots():
    tiers = CountingTiers(held=set())
    warming_in_flight, started_ahead = [], []
    tiers.read_done = lambda block_id: warming_in_flight.append(len([b for b in prefetch.in_flight if b < 100]))

    async def land(index: int, ref: BlockRef, data: bytes) -> bool:
        if index == 10:
            other_file = [BlockRef(block_id=100 + i, offset=0, length=16, checksum=0) for i in range(8)]
            started_ahead.extend(prefetch.fetch(other_file)[0])
        await trio.sleep(0.05)  # ten times a fetch
        return True

    async with trio.open_nursery() as nursery:
        prefetch = Prefetcher(tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        prefetch.warm([refs(range(20))], land)
    assert max(warming_in_flight) == WARM_IN_FLIGHT
    assert len(started_ahead) >= MAX_IN_FLIGHT - WARM_IN_FLIGHT


class RecordingPrefetch:
    def __init__(self) -> None:
        self.hand_overs: list[bool] = []

    def warm(self, batches, landed) -> bool:
        self.hand_overs.append(landed is not None)
        return True


class PageCacheOf:
    def __init__(self, largest_file: int) -> None:
        self.largest_file = largest_file

    async def store(self, inode: int, offset: int, data: memoryview) -> bool:
        return True


@trio_test
async def test_a_file_larger_than_the_page_cache_takes_is_warmed_without_hand_overs(files_factory):
    files = files_factory()
    of = await files.write_sealed(b"f", noise(4 * BS))
    files.data.prefetch = RecordingPrefetch()
    for largest in (4 * BS, 4 * BS - 1):
        files.data.page_cache = PageCacheOf(largest)
        assert files.data._warm(of)
    assert files.data.prefetch.hand_overs == [True, False]
