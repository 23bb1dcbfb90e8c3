"""Prefetcher.warm: every block of a file read broadly is fetched once, a few at a time."""

import trio
import trio.testing

from aifs.meta.attrs import BlockRef
from aifs.tiers.priority import Priority
from aifs.vfs.prefetch import WARM_IN_FLIGHT, Prefetcher

from .conftest import trio_test


class CountingTiers:
    """Tiers that hold `held` and take a moment to read anything else, counting the reads
    running at once."""

    def __init__(self, held: set[int]) -> None:
        self.held = held
        self.read_ids: list[int] = []
        self.running = self.most_running = 0

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
        return bytes(length)


def refs(ids: range) -> list[BlockRef]:
    return [BlockRef(block_id=i, offset=0, length=16, checksum=0) for i in ids]


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
        assert prefetch.fetch(refs(range(2))) == ([0, 1], 2)
        await trio.testing.wait_all_tasks_blocked()
        prefetch.warm([refs(range(4))])
    assert sorted(tiers.read_ids) == [0, 1, 2, 3]
