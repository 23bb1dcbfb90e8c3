"""Background fetches of blocks ahead of readers, bounded so they never crowd out demand reads.

Each fetch is one task in the volume's nursery that reads the block through the
tiers without promoting it; a demand read of the same block joins that fetch
(single flight) instead of starting its own. When the bound is reached, the
blocks left are not queued: the caller asks again on a later read, when the
reader may have moved past some of them (a late prefetch is worth nothing).
"""

import logging
from collections.abc import Callable

from aifs.errors import FsError
from aifs.meta.attrs import BlockRef
from aifs.tiers.manager import TierManager
from aifs.tiers.priority import Priority

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 8
Spawn = Callable[..., bool]


class Prefetcher:
    def __init__(self, tiers: TierManager, spawn: Spawn, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.tiers = tiers
        self._spawn = spawn
        self.max_in_flight = max_in_flight
        self.in_flight: set[int] = set()
        self.blocks = 0
        self.bytes = 0
        self.deferred = 0

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
            self.in_flight.add(ref.block_id)
            self.blocks += 1
            self.bytes += ref.length
            started.append(ref.block_id)
        return started, len(refs)

    async def _one(self, ref: BlockRef) -> None:
        try:
            await self.tiers.read(ref.block_id, ref.checksum, ref.length, promote=False, priority=Priority.READAHEAD)
        except FsError as e:  # the demand read will retry and report it
            log.debug("readahead of block %016x failed: %s", ref.block_id, e)
        finally:
            self.in_flight.discard(ref.block_id)

    def status(self) -> dict:
        return {"blocks": self.blocks, "bytes": self.bytes, "deferred": self.deferred,
                "in_flight": len(self.in_flight)}
