"""Background fetches of blocks ahead of readers, bounded so they never crowd out demand reads.

Each fetch is one task in the volume's nursery that reads the block through the
tiers without promoting it; a demand read of the same block joins that fetch
(single flight) instead of starting its own. When the bound is reached, further
readahead is dropped, not queued: a late prefetch is worth nothing.
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
        self.dropped = 0

    def fetch(self, refs: list[BlockRef]) -> list[int]:
        """Start fetching blocks not in RAM yet; the ids of those started."""
        started = []
        for ref in refs:
            if ref.block_id in self.in_flight or self.tiers.ram.contains(ref.block_id):
                continue
            if len(self.in_flight) >= self.max_in_flight:
                self.dropped += 1
                continue
            if not self._spawn(self._one, ref):
                break
            self.in_flight.add(ref.block_id)
            self.blocks += 1
            self.bytes += ref.length
            started.append(ref.block_id)
        return started

    async def _one(self, ref: BlockRef) -> None:
        try:
            await self.tiers.read(ref.block_id, ref.checksum, ref.length, promote=False, priority=Priority.READAHEAD)
        except FsError as e:  # the demand read will retry and report it
            log.debug("readahead of block %016x failed: %s", ref.block_id, e)
        finally:
            self.in_flight.discard(ref.block_id)

    def status(self) -> dict:
        return {"blocks": self.blocks, "bytes": self.bytes, "dropped": self.dropped,
                "in_flight": len(self.in_flight)}
