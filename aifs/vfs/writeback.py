"""Background movers: upload staged blocks to the cold tier, delete retired blocks.

Both work from queues in the metadata (`U` and `G` keys), so a crash loses no
work: on the next mount the queues are still there and the loops resume.
"""

import logging

import trio

from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.tiers.manager import TierManager

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0
GC_PERIOD_S = 5.0
RETRY_S = 5.0


class Uploader:
    """Drains the pending-upload queue with bounded concurrency."""

    def __init__(self, meta: MetaEngine, tiers: TierManager, concurrency: int = 4) -> None:
        self.meta = meta
        self.tiers = tiers
        self.concurrency = concurrency
        self._wake = trio.Event()
        self.uploaded_blocks = 0

    def kick(self) -> None:
        """Tell the loop that new blocks are pending."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            pending = self.meta.pending_uploads(limit=256)
            if not pending:
                with trio.move_on_after(IDLE_POLL_S):
                    await self._wake.wait()
                self._wake = trio.Event()
                continue
            await self._upload_all(pending)

    async def _upload_all(self, block_ids: list[int]) -> None:
        limiter = trio.Semaphore(self.concurrency)
        async with trio.open_nursery() as nursery:
            for block_id in block_ids:
                await limiter.acquire()
                nursery.start_soon(self._upload_one, block_id, limiter)

    async def _upload_one(self, block_id: int, limiter: trio.Semaphore) -> None:
        try:
            await self.tiers.upload(block_id)
        except FsError as e:
            log.error("upload of block %016x abandoned: %s; run aifs fsck", block_id, e)
        except OSError as e:
            log.warning("upload of block %016x failed: %s; retrying in %.0f s", block_id, e, RETRY_S)
            await trio.sleep(RETRY_S)
            return
        else:
            self.uploaded_blocks += 1
        finally:
            limiter.release()
        self.meta.upload_done(block_id)


class GarbageCollector:
    """Deletes retired blocks from every tier once their grace period is over."""

    def __init__(self, meta: MetaEngine, tiers: TierManager) -> None:
        self.meta = meta
        self.tiers = tiers

    async def run(self) -> None:
        while True:
            await self.collect()
            await trio.sleep(GC_PERIOD_S)

    async def collect(self) -> int:
        due = self.meta.garbage_due()
        for block_id in due:
            await self.tiers.delete(block_id)
        self.meta.garbage_done(due)
        return len(due)
