"""Background fetches of blocks ahead of readers, bounded so they never crowd out demand reads.

Each fetch is one task in the volume's nursery that reads the block through the
tiers without promoting it; a demand read of the same block joins that fetch
(single flight) instead of starting its own. When the bound is reached, the
blocks left are not queued: the caller asks again on a later read, when the
reader may have moved past some of them (a late prefetch is worth nothing).

A file read broadly at random is warmed instead: every block it has that is not local yet is
fetched, a few at a time, by one background task, since the reader will want all of them;
with `landed`, every block is read, local or not, and handed to it. A warmed block is in
flight while it is fetched, not while it is handed over: the bound is on fetches.
"""

import logging
from collections.abc import Awaitable, Callable, Iterable

import trio

from aifs.errors import FsError
from aifs.meta.attrs import BlockRef
from aifs.tiers.manager import TierManager
from aifs.tiers.priority import Priority

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 8
WARM_IN_FLIGHT = 6  # fetches of one warming at a time (of MAX_IN_FLIGHT), and as many hand-overs
Spawn = Callable[..., bool]
# (block index in the file, reference, bytes) -> whether the block was taken (into the page cache)
Landed = Callable[[int, BlockRef, bytes], Awaitable[bool]]


class Prefetcher:
    def __init__(self, tiers: TierManager, spawn: Spawn, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.tiers = tiers
        self._spawn = spawn
        self.max_in_flight = max_in_flight
        self.in_flight: set[int] = set()
        self.blocks = 0
        self.bytes = 0
        self.deferred = 0
        self.warmed_files = 0
        self.warming = 0  # files whose warming has not ended yet
        self.landed = 0  # blocks of warmed files that `landed` took

    def fetch(self, refs: list[BlockRef]) -> tuple[list[int], int]:
        """Start fetching blocks not in RAM yet, in order, until the bound is reached: the
        ids of those started, and how many of `refs` were seen to (started, or needing none)."""
        started = []
        for seen, ref in enumerate(refs):
            if ref.block_id in self.in_flight or self.tiers.holds("ram", ref.block_id):
                continue
            if len(self.in_flight) >= self.max_in_flight or not self._spawn(self._one, ref):
                self.deferred += 1
                return started, seen
            self._started(ref)
            started.append(ref.block_id)
        return started, len(refs)

    def warm(self, batches: Iterable[dict[int, BlockRef]], landed: Landed | None = None) -> bool:
        """Fetch every block of `batches` (by index in the file) that neither RAM nor NVMe holds,
        WARM_IN_FLIGHT at a time, in one background task; False when the volume is closing."""
        if not self._spawn(self._warm, batches, landed):
            return False
        self.warmed_files += 1
        return True

    async def _warm(self, batches: Iterable[dict[int, BlockRef]], landed: Landed | None) -> None:
        # fetches and hand-overs each have their slots: the next fetch starts while a block is handed over
        fetching, landing = trio.Semaphore(WARM_IN_FLIGHT), trio.Semaphore(WARM_IN_FLIGHT)
        self.warming += 1
        try:
            async with trio.open_nursery() as nursery:
                for batch in batches:
                    for index, ref in batch.items():
                        await fetching.acquire()
                        if ref.block_id in self.in_flight or (landed is None and self._local(ref.block_id)):
                            fetching.release()
                            continue
                        self._started(ref)
                        nursery.start_soon(self._warm_one, index, ref, fetching, landing, landed)
        finally:
            self.warming -= 1

    async def _warm_one(self, index: int, ref: BlockRef, fetching: trio.Semaphore, landing: trio.Semaphore,
                        landed: Landed | None) -> None:
        """Its fetch slot is given back once its bytes have a hand-over slot: hand-overs that
        lag hold up fetches, so no more than twice WARM_IN_FLIGHT blocks wait in memory. (Both
        semaphores are the warming's own: a failure or cancellation ends it, and them with it.)"""
        try:
            data = await self._read(ref)
        finally:
            self.in_flight.discard(ref.block_id)
        if data is None or landed is None:
            fetching.release()
            return
        async with landing:
            fetching.release()
            took = await landed(index, ref, data)  # read self.landed only after the await
            self.landed += took

    def _local(self, block_id: int) -> bool:
        return self.tiers.holds("ram", block_id) or self.tiers.holds("nvme", block_id)

    def _started(self, ref: BlockRef) -> None:
        self.in_flight.add(ref.block_id)
        self.blocks += 1
        self.bytes += ref.length

    async def _one(self, ref: BlockRef) -> None:
        try:
            await self._read(ref)
        finally:
            self.in_flight.discard(ref.block_id)

    async def _read(self, ref: BlockRef) -> bytes | None:
        try:
            return await self.tiers.read(
                ref.block_id, ref.checksum, ref.length, promote=False, priority=Priority.READAHEAD)
        except FsError as e:  # the demand read will retry and report it
            log.debug("readahead of block %016x failed: %s", ref.block_id, e)
            return None

    def status(self) -> dict:
        return {"blocks": self.blocks, "bytes": self.bytes, "deferred": self.deferred,
                "in_flight": len(self.in_flight), "warmed_files": self.warmed_files,
                "warming_files": self.warming, "page_cache_blocks": self.landed}
