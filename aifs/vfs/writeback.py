"""Background movers: upload staged blocks to the cold tier, delete retired blocks.

Both work from queues in the metadata (`U` and `G` keys), so a crash loses no
work: on the next mount the queues are read back and the loops resume. While
mounted, the upload queue is mirrored in memory so it is never rescanned.

While the metadata cannot be written (its disk is full) both keep their work: uploads go
on, their records wait to be cleared, and retired blocks stay queued; each picks up again
once the store takes writes.
"""

import logging
import math
from collections.abc import Callable

import trio

from aifs.config.models import WritebackConfig
from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.meta.packs import PackMember
from aifs.meta.writestate import MetaWriteFailed
from aifs.tiers.manager import TierManager
from aifs.vfs.openfile import OpenFiles
from aifs.vfs.packing import PackPlanner
from aifs.vfs.pacing import TokenBucket
from aifs.vfs.repack import Repacker

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0
GC_PERIOD_S = 1.0
SPARSE_RESCAN_S = 300.0  # packs more than half dead are otherwise learnt as their blocks die
RETRY_S = 5.0
QUIET_S = 0.5
SETTLE_S = 0.05
STAGING_HIGH_WATER = 0.5


def writers_quiet_at(tiers: TierManager, files: OpenFiles) -> float:
    """When the writers count as quiet if nothing else happens: QUIET_S after the last block
    staged, or, once no file being written is open, SETTLE_S after the last one closed (a
    finished checkpoint does not wait out QUIET_S; a stream of small creates keeps its writers
    busy)."""
    quiet = tiers.last_stage + QUIET_S
    if files.writing == 0:
        quiet = min(quiet, files.last_writer_closed + SETTLE_S)
    return quiet


def writers_active(tiers: TierManager, files: OpenFiles) -> bool:
    """Writers own the disk and the CPUs while they stage blocks (background work waits),
    until staging passes its high-water mark and uploads must make room."""
    busy = trio.current_time() < writers_quiet_at(tiers, files)
    return busy and tiers.dirty_bytes() < tiers.dirty_budget * STAGING_HIGH_WATER


class Uploader:
    """Keeps the allowed number of uploads in flight, and commits finished ones in groups:
    one durability flush, then one metadata commit, while the next uploads run.

    While writers stage blocks only `uploads_beside_writers` of the uploads run (none by
    default): on a node that shares its cores with the S3 server, or whose disk is slow,
    uploads beside the writers slow every close down more than they bring durability forward.
    A failed upload pauses new ones for RETRY_S; the block stays queued. A group whose flush
    or commit fails stays uploaded-but-queued and is committed again RETRY_S later, so nothing
    counts as uploaded that the metadata does not record as such.
    """

    def __init__(self, meta: MetaEngine, tiers: TierManager, files: OpenFiles,
                 settings: WritebackConfig) -> None:
        self.meta = meta
        self.tiers = tiers
        self.files = files
        self.concurrency = settings.upload_concurrency
        self.beside_writers = settings.uploads_beside_writers
        self._pace = TokenBucket(settings.upload_bandwidth)
        self._queue: dict[int, int] = meta.pending_uploads()
        self._urgent: set[int] = set()
        self._in_flight: set[int] = set()
        self._running = 0  # uploads in flight: a pack is one, however many blocks it holds
        self._uploaded: list[int] = []  # uploaded (or abandoned), not committed yet
        self._packs: dict[int, list[PackMember]] = {}  # uploaded packs, not recorded yet
        self._planner = PackPlanner(settings, tiers.staged_length)
        self._pack_due = math.inf  # when a pack waiting to fill is uploaded as it is
        self._paused_until = float("-inf")
        self._commit_failure: FsError | OSError | None = None  # of the last group, until one commits
        self._wake = trio.Event()
        self._finished = trio.Event()
        self._progress = trio.Event()
        self.uploaded_blocks = 0
        self.uploaded_bytes = 0
        self.uploaded_packs = 0

    @property
    def pending(self) -> list[int]:
        return list(self._queue)

    def enqueue(self, refs: list[BlockRef], pack_below: int | None = None) -> None:
        """New blocks to upload; `pack_below`: their path's own limit for packing (None: the volume's)."""
        self._queue.update((ref.block_id, ref.checksum) for ref in refs)
        self._planner.queued((ref.block_id for ref in refs), trio.current_time(), pack_below)
        self._wake.set()

    def writers_closed(self) -> None:
        """The last file being written was closed: what may start changes SETTLE_S from now."""
        self._wake.set()

    def pending_of(self, block_ids: list[int]) -> list[int]:
        return [b for b in block_ids if b in self._queue]

    def hurry(self, block_ids: list[int]) -> None:
        """Upload these first, even while writers are busy (sync, durability = "remote")."""
        first = {b: self._queue[b] for b in block_ids if b in self._queue}
        self._queue = first | self._queue
        self._urgent.update(first)
        self._wake.set()

    async def wait_uploaded(self, block_ids: list[int]) -> None:
        """Until these blocks are uploaded and recorded; raises the failure of the commit that
        could not record them (a full metadata disk) rather than wait it out."""
        while self.pending_of(block_ids):
            if self._commit_failure is not None:
                raise self._commit_failure
            await self._progress.wait()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._commit_uploaded)
            while True:
                blocks = self._next_upload() if self._may_start() else []
                if not blocks:
                    await self._wait_for_change()
                    continue
                self._in_flight.update(blocks)
                self._running += 1
                if len(blocks) == 1:
                    nursery.start_soon(self._upload_one, blocks[0], self._queue[blocks[0]])
                else:
                    nursery.start_soon(self._upload_pack, blocks)

    def _next_upload(self) -> list[int]:
        """The blocks of the next upload, among those queued and not started yet (in flight,
        or uploaded and not committed): one block, or a pack's members (aifs.vfs.packing)."""
        started = self._in_flight.union(self._uploaded)
        waiting = (b for b in self._queue if b not in started)
        blocks, self._pack_due = self._planner.next_upload(waiting, self._urgent, trio.current_time(),
                                                           writers_active(self.tiers, self.files))
        return blocks

    def _may_start(self) -> bool:
        return trio.current_time() >= self._paused_until and self._running < self._allowed()

    def _allowed(self) -> int:
        """How many uploads may run at once now: all, or only those allowed beside busy writers."""
        if self._urgent or not writers_active(self.tiers, self.files):
            return self.concurrency
        return self.beside_writers

    async def _wait_for_change(self) -> None:
        """Until what may start changes: blocks queued or hurried, an upload finished, the
        end of a pause, the writers quiet (looked at again then), or an idle poll."""
        now = trio.current_time()
        if now < self._paused_until:
            wake_at = self._paused_until
        elif writers_active(self.tiers, self.files):
            wake_at = writers_quiet_at(self.tiers, self.files)
        else:
            wake_at = min(now + IDLE_POLL_S, self._pack_due)
        with trio.move_on_at(wake_at):
            await self._wake.wait()
        self._wake = trio.Event()

    async def _upload_one(self, block_id: int, expected: int) -> None:
        try:
            if self.meta.is_pending(block_id):
                nbytes = await self.tiers.upload(block_id, expected)
                self.uploaded_bytes += nbytes
                await self._pace.take(nbytes)
            self._uploaded.append(block_id)
        except MetaWriteFailed as e:  # the metadata engine is away: the block stays queued
            self._retry_later(f"upload of block {block_id:016x} waits for the metadata: {e}")
        except FsError as e:
            log.error("upload of block %016x abandoned: %s; run aifs fsck", block_id, e)
            self._uploaded.append(block_id)
        except OSError as e:
            self._retry_later(f"upload of block {block_id:016x} failed: {e}")
        finally:
            self._ended([block_id])

    async def _upload_pack(self, block_ids: list[int]) -> None:
        """Upload blocks as one pack; those the pack leaves out (not staged here, or rotten)
        go back to be uploaded on their own, which reports what is wrong with them."""
        try:
            await self._put_pack(block_ids)
        except MetaWriteFailed as e:
            self._retry_later(f"upload of a pack of {len(block_ids)} blocks waits for the metadata: {e}")
        except OSError as e:
            self._retry_later(f"upload of a pack of {len(block_ids)} blocks failed: {e}")
        finally:
            self._ended(block_ids)

    def _retry_later(self, what: str) -> None:
        """An upload that failed stays queued; new ones pause for RETRY_S."""
        log.warning("%s; retrying in %.0f s", what, RETRY_S)
        self._paused_until = trio.current_time() + RETRY_S

    def _ended(self, block_ids: list[int]) -> None:
        """An upload is over, however it went: its slot is free, and what waits looks again."""
        self._in_flight.difference_update(block_ids)
        self._running -= 1
        self._wake.set()
        self._finished.set()

    async def _put_pack(self, block_ids: list[int]) -> None:
        pending = set(self.meta.pending_among(block_ids))
        try:
            pack_id = self.meta.new_pack()
        except MetaWriteFailed:  # no pack can be recorded now: the blocks go up on their own meanwhile
            self._planner.go_alone(block_ids)
            return
        try:
            members = await self.tiers.upload_pack(pack_id, [(b, self._queue[b]) for b in block_ids if b in pending])
        except OSError:
            self.meta.abandon_packs([pack_id])
            raise
        if members:
            self._packs[pack_id] = members  # recorded by the same commit that clears the members
            self.uploaded_packs += 1
        else:
            self.meta.abandon_packs([pack_id])
        placed = {m.block_id for m in members}
        self._planner.go_alone(b for b in block_ids if b in pending and b not in placed)
        self._uploaded.extend(b for b in block_ids if b in placed or b not in pending)
        nbytes = sum(m.length for m in members)
        self.uploaded_bytes += nbytes
        await self._pace.take(nbytes)

    async def _commit_uploaded(self) -> None:
        """Flush what finished to durability, then clear its queue records, in one go; the
        uploads that finish meanwhile make the next group."""
        while True:
            await self._group_due()
            done, packs = self._uploaded[:], dict(self._packs)
            if done and (kept := await self._commit_group(done, packs)) is not None:
                self._committed(done, packs, set(kept))
            self._progress.set()
            self._progress = trio.Event()

    def _committed(self, done: list[int], packs: dict[int, list[PackMember]], kept: set[int]) -> None:
        """A group is recorded: its blocks leave the queue, but for those `kept` queued by the
        metadata (members of packs the other nodes abandoned), which go up again."""
        finished = [b for b in done if b not in kept]
        self.uploaded_blocks += len(finished)
        del self._uploaded[:len(done)]
        for pack_id in packs:
            del self._packs[pack_id]
        for block_id in finished:
            self._queue.pop(block_id, None)
            self._urgent.discard(block_id)
        self._planner.forget(finished)
        if kept:
            log.warning("%d block(s) go up again: the other nodes took this node for dead while it put "
                        "the pack holding them, and abandoned that pack", len(kept))
            self._wake.set()

    async def _group_due(self) -> None:
        """Until an upload finishes; after a failed commit, RETRY_S at most."""
        with trio.move_on_after(RETRY_S if self._commit_failure is not None else math.inf):
            await self._finished.wait()
        self._finished = trio.Event()

    async def _commit_group(self, done: list[int], packs: dict[int, list[PackMember]]) -> list[int] | None:
        """Make a group durable, clear its records and record its packs; returns the blocks
        whose records stay, or None (the group stays) when either fails. A refused metadata
        write is logged by the store, once; other failures here."""
        try:
            self.meta.check_writable()  # no flush for a commit the store would refuse
            await self.tiers.uploads_durable(done)
            kept = self.meta.uploads_done(done, packs)
        except (FsError, OSError) as e:
            if self._commit_failure is None and not isinstance(e, MetaWriteFailed):
                log.warning("committing %d uploaded blocks failed: %s; retrying every %.0f s",
                            len(done), e, RETRY_S)
            self._commit_failure = e
            return None
        self._commit_failure = None
        return kept


class GarbageCollector:
    """Deletes retired blocks from every tier once their grace period is over, and the objects
    of blocks moved into packs; packs left more than half dead are packed anew. On a shared
    volume one node at a time does it: the one `runs_duties` says holds the lease."""

    def __init__(self, meta: MetaEngine, tiers: TierManager, files: OpenFiles, repacker: Repacker,
                 runs_duties: Callable[[], bool] | None = None) -> None:
        self.meta = meta
        self.tiers = tiers
        self.files = files
        self.repacker = repacker
        self._runs_duties = runs_duties or (lambda: True)
        self._sparse: set[int] = set()  # packs more than half dead, to pack anew
        self._rescan_at = 0.0  # when the pack records are next scanned for such packs

    async def run(self) -> None:
        """Every GC_PERIOD_S: orphans, then garbage. Asking whether the metadata takes writes
        is also what reopens a store that failed, once its disk has room again, even while
        nothing else writes."""
        while True:
            try:
                if self.meta.writable() and self._runs_duties():
                    self.reclaim_orphans()
                    await self.collect()
                    await self.drop_superseded()
                    await self.compact()
            except MetaWriteFailed:
                pass  # the store logs why; the next round tries again
            await trio.sleep(GC_PERIOD_S)

    def reclaim_orphans(self) -> int:
        """Free the orphans no handle holds: left by a crash, or by a last close whose
        reclaim the metadata refused. Stops at a refused write (tried again next round)."""
        freed = 0
        for ino in self.meta.orphans():
            if self.files.is_open(ino):
                continue
            try:
                self.meta.reclaim(ino)
            except MetaWriteFailed:
                break
            freed += 1
        return freed

    async def collect(self) -> int:
        """Delete what is due, in bulk; blocks the cold tier cannot delete now stay queued
        for a later round. Waits while writers are busy: garbage is never urgent."""
        if writers_active(self.tiers, self.files):
            return 0
        due = self.meta.garbage_due()
        if not due:
            return 0
        try:
            self._sparse.update(self.meta.settle_packed(due))  # emptied packs are queued in turn
            await self.tiers.delete(due)
        except OSError as e:
            log.warning("deleting %d retired blocks failed: %s; will retry", len(due), e)
            return 0
        try:
            self.meta.garbage_done(due)
        except MetaWriteFailed:
            return 0  # still queued: deleted again once the store takes writes, which is harmless
        return len(due)

    async def drop_superseded(self) -> int:
        """Delete the objects of blocks whose bytes moved into packs, once their grace is over."""
        due = self.meta.superseded_due()
        if not due:
            return 0
        try:
            await self.tiers.delete_durable(due)
        except OSError as e:
            log.warning("deleting %d objects of packed blocks failed: %s; will retry", len(due), e)
            return 0
        self.meta.superseded_done(due)
        return len(due)

    async def compact(self) -> int:
        """Pack the live blocks of mostly dead packs anew. Those packs are learnt as their
        blocks die, and found again every SPARSE_RESCAN_S by a scan of the pack records (off
        the event loop): after a restart, on a node that took the duties over, after a
        compaction that failed. Waits while writers are busy."""
        if trio.current_time() >= self._rescan_at:
            self._rescan_at = trio.current_time() + SPARSE_RESCAN_S
            self._sparse.update(await trio.to_thread.run_sync(self.meta.sparse_packs))
        moved = 0
        while self._sparse and not writers_active(self.tiers, self.files):
            pack_id = self._sparse.pop()
            try:
                moved += await self.repacker.compact(pack_id)
            except OSError as e:
                log.warning("packing the live blocks of pack %016x anew failed: %s", pack_id, e)
        return moved
