"""Sample-order prefetch: readers that hinted the order they will read files in (a DataLoader
knows its epoch's order before it starts) find each file on this node when they get to it.

Each reader's hint is a Plan. As its reads reach file k of the plan (an open through FUSE, or a
path asked of the data socket), the files from k on, up to the reader's `files_ahead` and
`bytes_ahead`, are fetched in order into RAM and NVMe at readahead priority, so demand reads
always go first; a demand read of a block being fetched joins that fetch. Blocks already in RAM
or NVMe cost nothing. Fetches of files the reader has left `files_ahead` behind unread, or of a
plan that ends (a new hint from its reader, idleness), are cancelled.

Hints are bounded: at most `max_readers` plans and `max_files` hinted files in all, the least
recently active plans giving way to new ones; a plan idle for `idle_timeout` ends.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from aifs.config.models import PrefetchConfig
from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.tiers.manager import LOCAL_TIERS, TierManager
from aifs.tiers.priority import Priority
from aifs.vfs.loading import unique_blocks
from aifs.vfs.prefetch import Spawn
from aifs.vfs.sampleorder import FileFetch, Plan

log = logging.getLogger(__name__)


@dataclass
class OrderCounts:
    """Since the mount: blocks fetched ahead by what became of them, and the reads of hinted
    files by whether their fetch got there first."""

    hints: int = 0
    blocks_fetched: int = 0
    bytes_fetched: int = 0
    blocks_used: int = 0  # of fetched or fetching files that their reader then read
    bytes_used: int = 0
    blocks_cancelled: int = 0  # not fetched yet when their file was left behind or the plan ended
    bytes_cancelled: int = 0
    blocks_wasted: int = 0  # fetched, and their file was left behind unread or the plan ended
    bytes_wasted: int = 0
    blocks_failed: int = 0  # no tier had them intact: the demand read reports the error
    files_ready: int = 0  # read with every block on this node already
    files_late: int = 0  # read while its fetch was under way: the read joined it
    files_missed: int = 0  # read before the window reached it (or its fetch failed)


class OrderPrefetcher:
    def __init__(self, meta: MetaEngine, tiers: TierManager, spawn: Spawn, settings: PrefetchConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.meta = meta
        self.tiers = tiers
        self._spawn = spawn
        self.settings = settings
        self._clock = clock
        self.plans: dict[str, Plan] = {}
        self.counts = OrderCounts()

    def hint(self, reader: str, inodes: list[int], files_ahead: int | None = None,
             bytes_ahead: int | None = None) -> dict:
        """Follow `reader` through `inodes` from now on, in place of its earlier hint; budgets
        above the mount's are lowered to them. Starts the first window's fetches."""
        now = self._clock()
        replaced = self.end(reader)
        dropped = self._make_room(len(inodes), now)
        plan = self.plans[reader] = Plan(reader, inodes, _within(files_ahead, self.settings.files_ahead),
                                         _within(bytes_ahead, self.settings.bytes_ahead), now)
        self.counts.hints += 1
        self._extend(plan)
        return {"reader": reader, "files": len(plan), "files_ahead": plan.files_ahead,
                "bytes_ahead": plan.bytes_ahead, "replaced": replaced, "dropped": dropped}

    def end(self, reader: str) -> bool:
        """Forget `reader`'s plan, cancelling its fetches that nobody read; whether it had one."""
        plan = self.plans.pop(reader, None)
        if plan is None:
            return False
        for fetch in plan.fetches.values():
            self._retire(fetch)
        return True

    def _expire(self, now: float) -> None:
        """End the plans whose readers have neither read nor hinted for `idle_timeout`."""
        for plan in list(self.plans.values()):
            if now - plan.active > self.settings.idle_timeout:
                self.end(plan.reader)

    def _make_room(self, files: int, now: float) -> list[str]:
        """End idle plans, then the least recently active ones until a plan of `files` fits;
        the readers whose plans made room."""
        self._expire(now)
        dropped = []
        while self.plans and (len(self.plans) >= self.settings.max_readers
                              or sum(map(len, self.plans.values())) + files > self.settings.max_files):
            oldest = min(self.plans.values(), key=lambda plan: plan.active)
            self.end(oldest.reader)
            dropped.append(oldest.reader)
        return dropped

    def touched(self, ino: int) -> None:
        """A reader opened `ino`, through FUSE or the data socket: every plan that holds it moves."""
        if not self.plans:
            return
        now = self._clock()
        self._expire(now)
        for plan in list(self.plans.values()):
            position = plan.read(ino)
            if position is None:
                continue
            plan.active = now
            self._count_read(plan.fetches.get(position))
            for fetch in plan.left_behind():
                self._retire(fetch)
            self._extend(plan)

    def _extend(self, plan: Plan) -> None:
        """Take in the files the window has room for, in order, and start fetching them."""
        for position in plan.window():
            ino = plan.inodes[position]
            try:
                fetch = FileFetch(ino, self._missing(ino))
            except FsError as e:  # the metadata engine did not answer: the reader's next open tries again
                log.debug("prefetch of inode %d put off: %s", ino, e)
                return
            if not plan.room_for(fetch.nbytes):
                return
            plan.take(position, fetch)
            if not fetch.refs:
                fetch.finished = True
            elif not self._spawn(self._fetch, fetch):  # not serving yet
                fetch.finished = fetch.failed = True

    def _missing(self, ino: int) -> list[BlockRef]:
        """The blocks of the file that neither RAM nor NVMe holds (none for a file that is gone)."""
        refs = unique_blocks(self.meta.all_block_refs(ino))
        return [ref for ref in refs if not any(self.tiers.holds(tier, ref.block_id) for tier in LOCAL_TIERS)]

    async def _fetch(self, fetch: FileFetch) -> None:
        """Bring the file's blocks into RAM and NVMe one after the other; a block being fetched
        already (by a demand read, another plan) is waited for instead of fetched twice."""
        with fetch.scope:
            try:
                for ref in fetch.refs:
                    if not self.tiers.holds("ram", ref.block_id):
                        await self.tiers.read(ref.block_id, ref.checksum, ref.length, promote=False,
                                              priority=Priority.READAHEAD)
                    if fetch.scope.cancel_called:  # counted as cancelled already
                        return
                    fetch.fetched += 1
                    self.counts.blocks_fetched += 1
                    self.counts.bytes_fetched += ref.length
            except FsError as e:  # the demand read will retry and report it
                fetch.failed = True
                self.counts.blocks_failed += len(fetch.refs) - fetch.fetched
                log.debug("prefetch of inode %d failed: %s", fetch.ino, e)
            finally:
                fetch.finished = True

    def _count_read(self, fetch: FileFetch | None) -> None:
        counts = self.counts
        if fetch is None or fetch.failed:
            counts.files_missed += 1
            return
        counts.blocks_used += len(fetch.refs)
        counts.bytes_used += fetch.nbytes
        if fetch.finished:
            counts.files_ready += 1
        else:
            counts.files_late += 1

    def _retire(self, fetch: FileFetch) -> None:
        """A fetch whose file will not be read in this plan: what it brought is wasted, and the
        rest is not fetched."""
        if fetch.read:
            return
        counts = self.counts
        counts.blocks_wasted += fetch.fetched
        counts.bytes_wasted += fetch.fetched_bytes
        if not fetch.finished:
            counts.blocks_cancelled += len(fetch.refs) - fetch.fetched
            counts.bytes_cancelled += fetch.nbytes - fetch.fetched_bytes
            fetch.scope.cancel()

    def status(self) -> dict:
        """The counters, and each plan: how far its reader has read and what is ahead of it."""
        now = self._clock()
        self._expire(now)
        plans = [{"reader": plan.reader, "files": len(plan), "cursor": plan.cursor, "window_end": plan.window_end,
                  "files_ahead": plan.files_ahead, "bytes_ahead": plan.bytes_ahead, "ahead_bytes": plan.ahead_bytes,
                  "in_flight": _in_flight(plan), "idle_s": round(now - plan.active, 1)}
                 for plan in self.plans.values()]
        return {"counts": self.figures(), "plans": plans}

    def figures(self) -> dict:
        """The counters, and the files being fetched now."""
        return {**asdict(self.counts), "in_flight": sum(map(_in_flight, self.plans.values()))}


def _within(asked: int | None, limit: int) -> int:
    """A reader's budget: what it asked for, at most the mount's."""
    return limit if asked is None else min(asked, limit)


def _in_flight(plan: Plan) -> int:
    return sum(not fetch.finished for fetch in plan.fetches.values())
