"""Blocks another node has staged but not yet uploaded, read from this node.

On a shared volume a file closed on node A is in the metadata at once, while its blocks
sit in A's NVMe until A's uploader sends them to the durable tier. A reader on node B that
finds a block in no tier it can reach asks A to upload it first (a `rush` key A hears in
the engine's pushes) and waits (bounded) for that upload, then reads it; when the wait runs
out it fails with EIO and says which node holds the block, never serving wrong or missing
bytes.
"""

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.writestate import MetaWriteFailed

log = logging.getLogger(__name__)

POLL_S = 0.05
POLL_MAX_S = 0.5
T = TypeVar("T")


class StagedElsewhere:
    def __init__(self, meta: MetaEngine, wait_s: float) -> None:
        self._meta = meta
        self._wait_s = wait_s

    async def read(self, block_id: int, fetch: Callable[[], Awaitable[T]]) -> T:
        """`fetch()`, waiting out the upload of a block staged on another node if it fails."""
        try:
            return await fetch()
        except FsError as e:
            if e.errno != errno.EIO or not self._meta.kv.shared:
                raise
            owner = self._meta.staged_on(block_id)
            if owner is None:
                raise
        await self._until_uploaded(block_id, owner)
        return await fetch()

    async def _until_uploaded(self, block_id: int, owner: str) -> None:
        try:
            self._meta.rush_upload(block_id)
        except (MetaWriteFailed, OSError) as e:  # the wait is the same, only longer
            log.warning("could not ask node %s to upload block %016x first: %s", owner, block_id, e)
        pause = POLL_S
        with trio.move_on_after(self._wait_s):
            while self._meta.staged_on(block_id) is not None:
                await trio.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
            return
        log.error("block %016x is still staged on node %s after %.0f s, not uploaded yet: reads of it "
                  "fail until that node uploads it", block_id, owner, self._wait_s)
        raise FsError(errno.EIO, f"block {block_id:016x} is staged on node {owner} and not uploaded yet")
