"""Group commit: concurrent fsync callers share one sync of the metadata WAL."""

from collections.abc import Callable

import trio


class GroupCommit:
    """A caller whose changes were committed before a sync started can ride on that sync.

    Each sync has a generation; a caller waits for the first sync that starts
    after it arrived, so every change it made is covered, and many callers that
    arrive together are served by one fsync.
    """

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._started = 0
        self._finished = 0
        self._running = False
        self._changed = trio.Condition()

    async def __call__(self) -> None:
        target = self._started + 1
        async with self._changed:
            while self._finished < target:
                if not self._running:
                    await self._run_one()
                else:
                    await self._changed.wait()

    async def _run_one(self) -> None:
        self._running = True
        self._started += 1
        generation = self._started
        self._changed.release()
        try:
            await trio.to_thread.run_sync(self._sync)
            self._finished = max(self._finished, generation)
        finally:
            with trio.CancelScope(shield=True):
                await self._changed.acquire()
            self._running = False
            self._changed.notify_all()
