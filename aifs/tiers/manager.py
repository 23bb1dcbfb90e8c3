"""TierManager: reads through the tiers in order, stages writes, and moves blocks down.

Read path: RAM, then NVMe, then the cold tier; whatever comes from below RAM is
checked against its checksum and copied into the tiers above. Concurrent reads
of one block share one fetch. Small I/O runs inline on the event loop (a thread
hop costs more than the I/O); large I/O goes to a bounded thread pool.
"""

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import trio

from aifs.errors import FsError
from aifs.tiers.checksum import CorruptBlock, checksum
from aifs.tiers.nvme import NvmeTier, StagingFull
from aifs.tiers.protocol import ColdTier, Tier
from aifs.tiers.ram import RamTier

log = logging.getLogger(__name__)

INLINE_BYTES = 256 << 10
STAGING_POLL_S = 0.05
T = TypeVar("T")


@dataclass
class TierStats:
    hits: int = 0
    bytes_read: int = 0


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | None = None
    error: FsError | None = None


class TierManager:
    def __init__(
        self, ram: RamTier, nvme: NvmeTier, cold: ColdTier,
        io_threads: int = 8, cold_threads: int = 16, dirty_wait: float = 60.0,
    ) -> None:
        self.dirty_wait = dirty_wait
        self.ram, self.nvme, self.cold = ram, nvme, cold
        self.stats = {tier.name: TierStats() for tier in (ram, nvme, cold)}
        self._io_limiter = trio.CapacityLimiter(io_threads)
        self._cold_limiter = trio.CapacityLimiter(cold_threads)
        self._flights: dict[int, _Flight] = {}
        self.last_stage = float("-inf")

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return (self.ram, self.nvme, self.cold)

    async def _io(self, nbytes: int, fn: Callable[..., T], *args) -> T:
        """Local I/O: small inline (a thread hop costs more), large on the I/O threads."""
        if nbytes <= INLINE_BYTES:
            return fn(*args)
        return await trio.to_thread.run_sync(fn, *args, limiter=self._io_limiter)

    async def _cold_io(self, fn: Callable[..., T], *args) -> T:
        """The cold tier may be a network away (S3): always off the event loop."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._cold_limiter)

    async def _get(self, tier: Tier, block_id: int, length: int) -> bytes | None:
        """A tier's copy, or None when it has none or cannot be reached (logged)."""
        try:
            if tier is self.cold:
                return await self._cold_io(tier.get, block_id)
            return await self._io(length, tier.get, block_id)
        except OSError as e:
            log.error("reading block %016x from tier %s failed: %s", block_id, tier.name, e)
            return None

    # -- reads -------------------------------------------------------------

    async def read(self, block_id: int, expected: int, length: int, promote: bool = True) -> bytes:
        """The whole object `block_id`, verified; raises FsError(EIO) when no tier has it intact.

        Readers of a block being fetched wait for that fetch; if its reader was
        cancelled rather than failed, the next waiter fetches again.
        """
        while True:
            data = self.ram.get(block_id, promote)
            if data is not None:
                self._count(self.ram, data)
                return data
            flight = self._flights.get(block_id)
            if flight is None:
                return await self._lead_fetch(block_id, expected, length)
            await flight.done.wait()
            if flight.data is not None:
                return flight.data
            if flight.error is not None:
                raise flight.error

    async def _lead_fetch(self, block_id: int, expected: int, length: int) -> bytes:
        flight = self._flights[block_id] = _Flight()
        try:
            flight.data = await self._fetch(block_id, expected, length)
            return flight.data
        except FsError as e:
            flight.error = e
            raise
        finally:
            del self._flights[block_id]
            flight.done.set()

    async def _fetch(self, block_id: int, expected: int, length: int) -> bytes:
        for tier in (self.nvme, self.cold):
            data = await self._get(tier, block_id, length)
            if data is None:
                continue
            if checksum(data) != expected:
                log.error("%s; trying the next copy", CorruptBlock(block_id, tier.name))
                if tier is self.nvme:
                    self.nvme.delete(block_id)
                continue
            self._count(tier, data)
            if tier is self.cold:
                await self._io(length, self.nvme.put, block_id, data)
            self.ram.put(block_id, data)
            return data
        raise FsError(errno.EIO, f"block {block_id:016x} is missing or corrupt in every tier")

    def _count(self, tier: Tier, data: bytes) -> None:
        stats = self.stats[tier.name]
        stats.hits += 1
        stats.bytes_read += len(data)

    # -- writes ------------------------------------------------------------

    async def stage(self, block_id: int, data: bytes) -> None:
        """Land a new block on NVMe as dirty (it is not yet in the cold tier) and in RAM.

        When staging is full of dirty blocks the writer waits for uploads to make
        room, up to `dirty_wait` seconds, then gets ENOSPC.
        """
        self.last_stage = trio.current_time()
        deadline = self.last_stage + self.dirty_wait
        warned = False
        while True:
            try:
                await self._io(len(data), self.nvme.put, block_id, data, True)
                break
            except StagingFull as e:
                if trio.current_time() >= deadline:
                    raise FsError(errno.ENOSPC, f"{e}; uploads freed no room within {self.dirty_wait:.0f} s")
                if not warned:
                    log.warning("writer waits for uploads to drain: %s", e)
                    warned = True
                await trio.sleep(STAGING_POLL_S)
        self.ram.put(block_id, data)

    async def sync(self, block_ids: list[int]) -> None:
        if block_ids:
            await trio.to_thread.run_sync(self.nvme.sync, block_ids, limiter=self._io_limiter)

    async def upload(self, block_id: int, expected: int) -> int:
        """Copy a staged block to the cold tier (durable only after `uploads_durable`).

        The staged copy is verified first: a rotten copy must never become the durable one.
        """
        data = await self._io(INLINE_BYTES + 1, self.nvme.get, block_id)
        if data is None:
            raise FsError(errno.EIO, f"staged block {block_id:016x} is missing from NVMe")
        if checksum(data) != expected:
            raise FsError(errno.EIO, str(CorruptBlock(block_id, self.nvme.name)))
        await self._cold_io(self.cold.put, block_id, data)
        return len(data)

    async def uploads_durable(self, block_ids: list[int]) -> None:
        """Make uploaded blocks durable in the cold tier; from then on NVMe may evict them."""
        await self._cold_io(self.cold.flush)
        for block_id in block_ids:
            self.nvme.mark_clean(block_id)

    async def delete(self, block_id: int) -> None:
        """Drop a retired block everywhere; raises OSError when the cold tier cannot be reached."""
        self.ram.delete(block_id)
        self.nvme.delete(block_id)
        await self._cold_io(self.cold.delete, block_id)
