"""TierManager: reads through the tiers in order, stages writes, and moves blocks down.

Read path: RAM, then NVMe, then the remote flash tier (when configured), then
the cold tier; whatever comes from below RAM is checked against its checksum
and copied into the local tiers above. Concurrent reads of one block share one
fetch. A ranged read fetches only the chunks it needs and checks them against
their own checksums, filling no tier. Small local I/O runs inline on the event
loop (a thread hop costs more than the I/O); large I/O, and every call to the
remote and cold tiers, takes a slot of that back end's PriorityLimiter, so
demand reads go before readahead, warmup and uploads.

The remote tier is a cache shared by many nodes: every call to it runs in a
thread (a dead server may hold one for the read bound), except ranged reads
over TCP, which wait on the loop itself under the same bounds (a thread hop
would cost them as much as the network). Anything it fails to do is a miss,
and blocks reach it through background offers that are dropped when its
backlog is full: those read from the cold tier, and those uploaded once the
cold tier holds them durably. With `only_copy` blocks are offered, pinned, as
soon as they are staged, and unpinned once durable. A block found remotely is
copied to NVMe in the background too: the reader, who came for the remote
tier's low latency, does not wait for a local disk write.

A block read from the cold tier is copied to NVMe by the same fill thread (aifs.tiers.fills),
in batches, so the event loop serving the read never writes to the disk itself; a reader
waits for a copy of its own (on an I/O thread) only when the fill queue is full, so a data
set read faster than NVMe takes it is still cached whole.

The peers tier (the other mounts of a shared volume) sits below the remote tier and
is used the same way, except that only blocks read from the cold tier are offered to
it: each block goes to the one peer that consistent hashing names for it, where every
other node then finds it instead of fetching it from the cold tier again.

A TierManager is the one face the layers above (vfs, fuse, metrics) have onto the block
store: it also answers for the figures they report and places blocks by tier name, so none
of them holds a particular tier. It is built from the config by aifs.blockstore.compose, and
knows the shared caches only through the RemoteTier and PeerTier protocols.
"""

import errno
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from aifs.errors import FsError
from aifs.meta.packs import PackMember
from aifs.metrics.tiers import observe_tier_read
from aifs.tiers.background import BackgroundCalls, RemoteUsage
from aifs.tiers.fills import Fills
from aifs.tiers.checksum import Buffer, CorruptBlock, checksum, chunk_span, chunks_match, sums_of
from aifs.tiers.nvme import NvmeTier, StagingFull
from aifs.tiers.priority import Priority, PriorityLimiter, Ticket
from aifs.tiers.protocol import ColdTier, PeerTier, RemoteTier, Tier
from aifs.tiers.ram import RamTier
from aifs.tiers.records import Location

log = logging.getLogger(__name__)

INLINE_BYTES = 256 << 10
STAGING_POLL_S = 0.05
WAIT_REPORT_S = 10.0  # at most one "writers wait" line this often, however many writers wait
FILL_WAIT_S = 10.0  # how long a warmup waits for the NVMe copies queued before its own
RESERVED_FOR_DEMAND = 0.25  # of each back end's slots: background work never takes these
LOCAL_TIERS = ("ram", "nvme")  # the tiers files are pinned and loaded into, by name
T = TypeVar("T")
Span = tuple[int, int] | None  # (offset, length) of a ranged read; None: the whole object


@dataclass
class TierStats:
    hits: int = 0
    bytes_read: int = 0


@dataclass
class _Flight:
    ticket: Ticket
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | None = None
    error: FsError | None = None


def _limiter(slots: int) -> PriorityLimiter:
    return PriorityLimiter(slots, max(1, int(slots * RESERVED_FOR_DEMAND)))


class TierManager:
    def __init__(
        self, ram: RamTier, nvme: NvmeTier, cold: ColdTier,
        io_threads: int = 8, cold_threads: int = 16, dirty_wait: float = 60.0,
        remote: RemoteTier | None = None, remote_threads: int = 8, remote_capacity: int | None = None,
        only_copy: bool = False, peers: PeerTier | None = None,
    ) -> None:
        """`remote_capacity` is what status reports for the remote tier (None: the servers' total)."""
        self.dirty_wait = dirty_wait
        self.ram, self.nvme, self.cold, self.remote, self.peers = ram, nvme, cold, remote, peers
        self.only_copy = only_copy
        self._io_limiter = _limiter(io_threads)
        self._cold_limiter = _limiter(cold_threads)
        self._remote_limiter = _limiter(remote_threads)
        self.background: BackgroundCalls | None = None  # offers, unpins, usage refreshes
        self.fills = Fills(nvme.fill)  # NVMe copies of blocks read from below
        cold.on_promoted(self._promoted)
        self._usage: tuple[RemoteUsage, ...] = ()
        self._pinned_remotely: set[int] = set()  # staged blocks whose pinned copies are on flash
        if self._shared:
            self.background = BackgroundCalls()
            self._usage = tuple(RemoteUsage(tier, self.background, remote_capacity if tier is remote else None)
                                for tier in self._shared)
        self.stats = {tier.name: TierStats() for tier in self.tiers}
        self._upload_buffers = threading.local()  # one reused buffer per cold-tier thread
        self._flights: dict[Hashable, _Flight] = {}  # by block id, or (block id, start, end) for ranges
        self.last_stage = float("-inf")
        self._waits = 0  # writers that waited for room since the last report
        self._waits_reported = float("-inf")

    @property
    def _shared(self) -> tuple[RemoteTier, ...]:
        """The caches shared with other nodes, top to bottom: flash servers, then peers."""
        return tuple(tier for tier in (self.remote, self.peers) if tier is not None)

    @property
    def tiers(self) -> tuple[Tier | RemoteUsage, ...]:
        """Top to bottom, as status shows them: shared caches through figures that never wait."""
        return (self.ram, self.nvme, *self._usage, self.cold)

    @property
    def _below_ram(self) -> tuple[Tier, ...]:
        return (self.nvme, *self._shared, self.cold)

    async def _io(self, nbytes: int, fn: Callable[..., T], *args, ticket: Ticket | None = None) -> T:
        """Local I/O: small inline (a thread hop costs more), large on the I/O threads."""
        if nbytes <= INLINE_BYTES:
            return fn(*args)
        return await self._io_limiter.run(ticket or Ticket(Priority.DEMAND), fn, *args)

    async def for_peers(self, fn: Callable[..., T], *args) -> T:
        """Local I/O for another node (this node's block server): on the I/O threads at
        readahead priority, so this node's own demand reads go first."""
        return await self._io_limiter.run(Ticket(Priority.READAHEAD), fn, *args)

    async def _cold_io(self, ticket: Ticket, fn: Callable[..., T], *args) -> T:
        """The cold tier may be a network away (S3): always off the event loop."""
        return await self._cold_limiter.run(ticket, fn, *args)

    async def _remote_io(self, ticket: Ticket, fn: Callable[..., T], *args) -> T:
        """The remote tier may wait up to its read bound on a dead server: always off the event loop."""
        return await self._remote_limiter.run(ticket, fn, *args)

    async def _get(self, tier: Tier, block_id: int, length: int, ticket: Ticket, span: Span = None) -> bytes | None:
        """A tier's copy (of `span`, or the whole object), or None when it has none or cannot
        be reached (logged); timed for metrics. NVMe's index answers a miss at once: no
        thread hop, no wait behind the appends of other blocks."""
        if tier is self.nvme and not self.nvme.contains(block_id):
            return None
        started = time.perf_counter()
        call = (tier.get, block_id) if span is None else (tier.get_range, block_id, *span)
        try:
            if tier is self.cold:
                if (held := self.cold.get_held(block_id, *(span or (0, None)))) is not None:
                    return held  # in the cold tier's memory (a pack fetched ahead): no thread hop
                call = (partial(call[0], demand=ticket.priority == Priority.DEMAND), *call[1:])
            if tier is self.remote or tier is self.peers:
                return await self._remote_get(tier, ticket, call, span)
            return await self._get_from(tier, length if span is None else span[1], ticket, call)
        finally:
            observe_tier_read(tier.name, time.perf_counter() - started)

    async def _get_from(self, tier: Tier, nbytes: int, ticket: Ticket, call: tuple) -> bytes | None:
        try:
            if tier is self.cold:
                return await self._cold_io(ticket, *call)
            return await self._io(nbytes, *call, ticket=ticket)
        except OSError as e:
            log.error("reading block %016x from tier %s failed: %s", call[1], tier.name, e)
            return None

    async def _remote_get(self, tier: RemoteTier, ticket: Ticket, call: tuple, span: Span) -> bytes | None:
        """Whatever goes wrong in a shared cache is a miss: the read goes on to the cold tier.
        A ranged read stays on the loop where the tier can serve it so (TCP)."""
        try:
            if span is not None and tier.ranges_on_loop:
                async with self._remote_limiter.slot(ticket):
                    return await tier.get_range_on_loop(call[1], *span)
            return await self._remote_io(ticket, *call)
        except Exception as e:  # noqa: BLE001 - a broken cache must never fail a read
            log.warning("reading block %016x from the %s tier failed, reading further down: %r",
                        call[1], tier.name, e)
            return None

    # -- reads -------------------------------------------------------------

    async def read(self, block_id: int, expected: int, length: int, promote: bool = True,
                   priority: Priority = Priority.DEMAND) -> bytes:
        """The whole object `block_id`, verified; raises FsError(EIO) when no tier has it intact.

        Readers of a block being fetched wait for that fetch (raising its priority to
        theirs); if its reader was cancelled rather than failed, the next one fetches again.
        """
        while True:
            data = self.ram.get(block_id, promote)
            if data is not None:
                self._count(self.ram, data)
                return data
            data = await self._single_flight(
                block_id, priority, lambda ticket: self._fetch(block_id, expected, length, ticket))
            if data is not None:
                return data

    async def read_range(self, block_id: int, length: int, sums: bytes, lo: int, hi: int,
                         priority: Priority = Priority.DEMAND) -> bytes:
        """Bytes [lo, hi) of object `block_id` (`length` bytes, chunk checksums `sums`).

        A whole copy in RAM, or a whole fetch already under way, serves it; otherwise
        only the chunks covering the range are read from the first tier that has the
        block, verified chunk by chunk, and nothing is cached: the kernel's page cache
        keeps the pages, and heat decides whether the whole block is worth fetching.
        """
        start, end = chunk_span(lo, hi, length)
        while True:
            data = self.ram.get(block_id, promote=False)
            if data is None and block_id in self._flights:
                data = await self._single_flight(block_id, priority, None)
            if data is not None:
                self._count(self.ram, data)
                return bytes(memoryview(data)[lo:hi])
            data = await self._single_flight(
                (block_id, start, end), priority, lambda t: self._fetch_range(block_id, sums, start, end, t))
            if data is not None:
                return bytes(memoryview(data)[lo - start:hi - start])

    async def _single_flight(self, key: Hashable, priority: Priority,
                             fetch: Callable[[Ticket], Awaitable[bytes]] | None) -> bytes | None:
        """The result of the one fetch of `key` in flight, led by this caller if none is
        (None: the flight it waited for was cancelled, or there was none to join)."""
        flight = self._flights.get(key)
        if flight is not None:
            flight.ticket.urge(priority)
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.data
        if fetch is None:
            return None
        flight = self._flights[key] = _Flight(Ticket(priority))
        try:
            flight.data = await fetch(flight.ticket)
            return flight.data
        except FsError as e:
            flight.error = e
            raise
        finally:
            del self._flights[key]
            flight.done.set()

    async def _fetch(self, block_id: int, expected: int, length: int, ticket: Ticket) -> bytes:
        for tier in self._below_ram:
            data = await self._get(tier, block_id, length, ticket)
            if data is None:
                continue
            if checksum(data) != expected:
                self._corrupt(block_id, tier)
                continue
            self._count(tier, data)
            if tier in self._shared:
                self.fills.submit(block_id, data)
            elif tier is self.cold:
                if not self.fills.submit(block_id, data):
                    await self._io_limiter.run(ticket, self._fill, block_id, data)
                self._offer(block_id, data)
            self.ram.put(block_id, data)
            return data
        raise FsError(errno.EIO, f"block {block_id:016x} is missing or corrupt in every tier")

    async def _fetch_range(self, block_id: int, sums: bytes, start: int, end: int, ticket: Ticket) -> bytes:
        for tier in self._below_ram:
            data = await self._get(tier, block_id, end - start, ticket, (start, end - start))
            if data is None:
                continue
            if len(data) != end - start or not chunks_match(data, start, sums):
                self._corrupt(block_id, tier)
                continue
            self._count(tier, data)
            return data
        raise FsError(errno.EIO, f"bytes {start}-{end} of block {block_id:016x} are missing or corrupt in every tier")

    def _promoted(self, blocks: list[tuple[int, bytes, int]]) -> None:
        """Blocks the cold tier fetched for readers coming back to them (the members of a
        hot pack), from its thread: those intact are copied to NVMe like any block read from
        below, while the fill queue has room."""
        for block_id, data, expected in blocks:
            if not self.nvme.contains(block_id) and checksum(data) == expected:
                self.fills.submit(block_id, data)

    def _fill(self, block_id: int, data: bytes) -> None:
        """Copy a block just read from below to NVMe; the reader holds it in memory already."""
        self.nvme.fill([(block_id, data)])

    def _corrupt(self, block_id: int, tier: Tier) -> None:
        """Never served: logged by block and tier; a rotten NVMe copy is dropped so it is fetched again."""
        log.error("%s; trying the next copy", CorruptBlock(block_id, tier.name))
        if tier is self.nvme:
            self.nvme.delete(block_id)

    def _count(self, tier: Tier, data: bytes) -> None:
        self._count_bytes(tier, len(data))

    def _count_bytes(self, tier: Tier, nbytes: int) -> None:
        stats = self.stats[tier.name]
        stats.hits += 1
        stats.bytes_read += nbytes

    # -- offers to the remote tier (background, bounded, never waited for) ---------------

    def _offer(self, block_id: int, data: bytes) -> None:
        """A block read from the cold tier: the next node that wants it finds it on flash or a peer."""
        if self.background is not None:
            for tier in self._shared:
                self.background.submit(tier.put, block_id, data, False, nbytes=len(data))

    def _offer_staged(self, block_id: int) -> None:
        """Offer a block from NVMe staging (read there by the worker, so the backlog holds only ids)."""
        if self.background is not None:
            self.background.submit(self._put_staged, block_id)

    def _put_staged(self, block_id: int) -> None:
        """Runs on a worker thread. A block still dirty goes out pinned (only_copy, or a close
        under durability "cluster"), and is unpinned at once if its upload became durable
        meanwhile (the unpin may have run first). It counts as pinned before the put, so an
        upload that becomes durable during the put unpins it too."""
        assert self.remote is not None
        data = self.nvme.get(block_id)
        if data is None:  # evicted or retired since: nothing to offer
            return
        pin = self.nvme.is_dirty(block_id)
        if pin:
            self._pinned_remotely.add(block_id)
        self.remote.put(block_id, data, pin)
        if pin and not self.nvme.is_dirty(block_id):
            self.remote.unpin(block_id)
            self._pinned_remotely.discard(block_id)

    async def replicate(self, block_ids: list[int]) -> None:
        """Put staged blocks, pinned, on every flash server the ring places them on (durability
        "cluster"): from then on any node reads them, and the loss of this node loses none.
        Raises FsError(EIO) when some block did not reach all of its servers; it stays staged
        here and is uploaded as usual."""
        assert self.remote is not None
        failures: list[str] = []
        wanted = [b for b in block_ids if b not in self._pinned_remotely and self.nvme.is_dirty(b)]
        async with trio.open_nursery() as nursery:
            for block_id in wanted:
                nursery.start_soon(self._replicate_one, block_id, failures)
        if failures:
            raise FsError(errno.EIO, f"{len(failures)} of {len(wanted)} block(s) did not reach the flash servers, "
                                     f"so losing this node would lose them: {failures[0]}")

    async def _replicate_one(self, block_id: int, failures: list[str]) -> None:
        try:
            await self._remote_io(Ticket(Priority.DEMAND), self._put_staged, block_id)
        except Exception as e:  # noqa: BLE001 - whatever failed, the block is not replicated
            self._pinned_remotely.discard(block_id)
            failures.append(str(e))

    async def adopt(self, block_id: int, expected: int) -> bool:
        """Upload a block that another node staged and can no longer upload (it died), from its
        pinned copy on the flash servers; False when none of them holds it intact."""
        assert self.remote is not None
        ticket = Ticket(Priority.UPLOAD)
        data = await self._remote_io(ticket, self.remote.get, block_id)
        if data is None or checksum(data) != expected:
            return False
        await self._cold_io(ticket, self.cold.put, block_id, data)
        return True

    async def adopted_durable(self, block_ids: list[int]) -> None:
        """Make adopted uploads durable; the flash servers may then evict their copies."""
        await self._cold_io(Ticket(Priority.UPLOAD), self.cold.flush)
        for block_id in block_ids:
            self._unpin_remote(block_id)

    def _unpin_remote(self, block_id: int) -> None:
        assert self.remote is not None and self.background is not None
        self.background.submit(self.remote.unpin, block_id)
        self._pinned_remotely.discard(block_id)

    # -- writes ------------------------------------------------------------

    async def stage(self, block_id: int, data: Buffer | list[Buffer], cache: bool = True) -> tuple[int, bytes]:
        """Land a new block (its bytes, or parts to join) on NVMe as dirty (it is not yet in the
        cold tier), and with `cache` in RAM (only bytes that are never changed afterwards);
        returns its checksum and chunk checksums, computed beside the write (off the loop
        for large blocks).

        When staging is full of dirty blocks the writer waits for uploads to make
        room, up to `dirty_wait` seconds, then gets ENOSPC.
        """
        parts = data if isinstance(data, list) else [data]
        self.last_stage = trio.current_time()
        deadline = self.last_stage + self.dirty_wait
        waited = False
        while True:
            try:
                staged = await self._io(sum(map(len, parts)), self._stage_dirty, block_id, parts)
                break
            except StagingFull as e:
                if trio.current_time() >= deadline:
                    raise FsError(errno.ENOSPC, f"{e}; uploads freed no room within {self.dirty_wait:.0f} s")
                if not waited:
                    self._writer_waits(e)
                    waited = True
                await trio.sleep(STAGING_POLL_S)
        if cache:
            self.ram.put(block_id, parts[0] if len(parts) == 1 else b"".join(parts))
        if self.only_copy:
            self._offer_staged(block_id)
        return staged

    def _writer_waits(self, why: StagingFull) -> None:
        """Count a writer that waits for room; one line every WAIT_REPORT_S tells how many did."""
        self._waits += 1
        now = trio.current_time()
        if now - self._waits_reported >= WAIT_REPORT_S:
            log.warning("writers waited %d time(s) for uploads to drain room in staging (reported at most "
                        "every %.0f s): %s", self._waits, WAIT_REPORT_S, why)
            self._waits, self._waits_reported = 0, now

    def _stage_dirty(self, block_id: int, parts: list[Buffer]) -> tuple[int, bytes]:
        self.nvme.put(block_id, parts, True)
        return sums_of(parts)

    async def sync(self, block_ids: list[int]) -> None:
        if block_ids:
            await self._io_limiter.run(Ticket(Priority.DEMAND), self.nvme.sync, block_ids)

    async def upload(self, block_id: int, expected: int) -> int:
        """Copy a staged block to the cold tier (durable only after `uploads_durable`)."""
        return await self._cold_io(Ticket(Priority.UPLOAD), self._upload_staged, block_id, expected)

    def _upload_staged(self, block_id: int, expected: int) -> int:
        """On a cold-tier thread: read the staged copy into that thread's own buffer, verify it
        (a rotten copy must never become the durable one), and put it."""
        buf = getattr(self._upload_buffers, "buf", None)
        if buf is None:
            buf = self._upload_buffers.buf = bytearray()
        if not self.nvme.read_into(block_id, buf):
            raise FsError(errno.EIO, f"staged block {block_id:016x} is missing from NVMe")
        if checksum(buf) != expected:
            raise FsError(errno.EIO, str(CorruptBlock(block_id, self.nvme.name)))
        self.cold.put(block_id, buf)
        return len(buf)

    def staged_length(self, block_id: int) -> int | None:
        """The size of a block NVMe holds (staged for upload); None when it holds none."""
        location = self.nvme.locate(block_id)
        return None if location is None else location.length

    async def upload_pack(self, pack_id: int, members: list[tuple[int, int]]) -> list[PackMember]:
        """Copy staged blocks (id, checksum), end to end in their order, to the cold tier as
        one object `pack_id` (durable only after `uploads_durable`); returns where each went.
        A block missing from NVMe or rotten there is left out, for its caller to upload on
        its own (and fail loudly)."""
        return await self._cold_io(Ticket(Priority.UPLOAD), self._upload_pack, pack_id, members)

    def _upload_pack(self, pack_id: int, members: list[tuple[int, int]]) -> list[PackMember]:
        data = bytearray()
        placed = []
        for block_id, expected in members:
            block = self.nvme.get(block_id)
            if block is None or checksum(block) != expected:
                continue
            placed.append(PackMember(block_id, len(data), len(block), expected))
            data += block
        if placed:
            self.cold.put(pack_id, data)
        return placed

    async def put_durable(self, object_id: int, data: bytes) -> None:
        """Put an object built from blocks already durable (a pack made anew) and make it
        durable before returning, at upload priority."""
        ticket = Ticket(Priority.UPLOAD)
        await self._cold_io(ticket, self.cold.put, object_id, data)
        await self._cold_io(ticket, self.cold.flush)

    async def read_durable(self, object_id: int, offset: int, length: int) -> bytes | None:
        """Bytes of an object in the durable tier as it is stored (a whole pack), unverified:
        the caller checks each block in it against its own checksum."""
        return await self._cold_io(Ticket(Priority.UPLOAD), self.cold.get_range, object_id, offset, length)

    async def delete_durable(self, object_ids: list[int]) -> None:
        """Delete objects from the durable tier alone: blocks whose bytes moved into packs
        keep every other copy."""
        await self._cold_io(Ticket(Priority.UPLOAD), self.cold.delete_many, object_ids)

    async def uploads_durable(self, block_ids: list[int]) -> None:
        """Make uploaded blocks durable in the cold tier; from then on NVMe may evict them."""
        await self._cold_io(Ticket(Priority.UPLOAD), self.cold.flush)
        for block_id in block_ids:
            self.nvme.mark_clean(block_id)
        if self.remote is None or self.background is None:
            return
        for block_id in block_ids:
            if self.only_copy or block_id in self._pinned_remotely:  # the servers may evict it now
                self._unpin_remote(block_id)
            else:
                self._offer_staged(block_id)

    async def delete(self, block_ids: list[int]) -> None:
        """Drop retired blocks everywhere; raises OSError when the cold tier cannot delete them
        (all are then still queued: deleting an object twice is harmless).

        A copy the remote tier fails to delete is harmless: block ids are never reused,
        so it is never read again, and the servers evict it in time.
        """
        for block_id in block_ids:
            self.ram.delete(block_id)
            self.nvme.delete(block_id)
            self._pinned_remotely.discard(block_id)
        self.nvme.unpin(block_ids)  # retired: unlike a rotten copy dropped for a refetch, never back
        ticket = Ticket(Priority.UPLOAD)  # garbage is background work, like uploads
        if self.remote is not None:
            await self._remote_io(ticket, self._delete_remote, block_ids)
        await self._cold_io(ticket, self.cold.delete_many, block_ids)

    def _delete_remote(self, block_ids: list[int]) -> None:
        assert self.remote is not None
        for block_id in block_ids:
            try:
                self.remote.delete(block_id)
            except Exception as e:  # noqa: BLE001 - see delete()
                log.warning("deleting block %016x from the remote tier failed: %r", block_id, e)

    # -- the face the layers above have: figures, placement by tier name, lifecycle --------

    @property
    def configured_tiers(self) -> tuple[Tier | RemoteUsage, ...]:
        """The tiers the config names, top to bottom, as status lists them: a RAM tier of no
        capacity is no tier."""
        return tuple(tier for tier in self.tiers if tier is not self.ram or self.ram.capacity > 0)

    def pending_bytes(self, block_ids: list[int]) -> int:
        """Bytes of these blocks in staging: what blocks waiting for upload take there."""
        return self.nvme.bytes_of(block_ids)

    def dirty_bytes(self) -> int:
        """Bytes staged and not yet durable."""
        return self.nvme.dirty_bytes()

    @property
    def dirty_budget(self) -> int:
        """The dirty bytes staging takes before writers wait for uploads (writeback.max_dirty, or
        less when the disk has less room)."""
        return self.nvme.max_dirty

    @property
    def offers_pending(self) -> int:
        """Calls to the shared caches queued or running: offers, unpins, usage refreshes."""
        return self.background.pending if self.background is not None else 0

    @property
    def durable_name(self) -> str:
        return self.cold.name

    @property
    def durable_capacity(self) -> int:
        return self.cold.capacity

    def durable_url(self) -> str:
        """Where an operator finds the durable tier."""
        return self.cold.url()

    @property
    def packs_fetched_ahead(self) -> int:
        """Packs the durable tier read to their end in one request for a reader going in order."""
        return getattr(self.cold, "fetched_ahead", 0)  # a durable tier without packs fetches none

    def durable_used(self) -> int | None:
        """Bytes in the durable tier when it can count them cheaply (a local store); None for a
        bucket, which cannot be asked its size without listing it."""
        return self.cold.used() if self.cold.used_is_exact else None

    def durable_breaker_health(self) -> dict[str, Any] | None:
        """The durable tier's circuit breaker (CircuitBreaker.health); None when it has none: a
        local store is always up."""
        breaker = getattr(self.cold, "breaker", None)
        return None if breaker is None else breaker.health()

    def server_health(self, tier_name: str) -> list[dict[str, Any]] | None:
        """Each server of the shared cache named `tier_name` as its circuit breaker sees it;
        None when no shared cache has that name."""
        shared = next((tier for tier in self._shared if tier.name == tier_name), None)
        return None if shared is None else shared.status()

    @property
    def can_adopt(self) -> bool:
        """Whether blocks other nodes staged can be read back from the flash servers (`adopt`)."""
        return self.remote is not None

    def _local(self, tier: str) -> RamTier | NvmeTier:
        """The RAM or NVMe tier by name; anything else is a caller's mistake."""
        if tier not in LOCAL_TIERS:
            raise ValueError(f"tier must be one of {', '.join(LOCAL_TIERS)}, not {tier!r}")
        return self.ram if tier == "ram" else self.nvme

    def read_through(self, block_id: int) -> None:
        """A block a stream has read through once leaves RAM (one re-used or pinned stays)."""
        self.ram.release(block_id)

    def holds(self, tier: str, block_id: int) -> bool:
        """Whether `tier` ("ram" or "nvme") holds the block now."""
        return self._local(tier).contains(block_id)

    def flash_holds(self, block_id: int) -> bool:
        """Whether the flash servers that answer hold the block (False without a remote tier).
        It asks them: call it from a thread, as a server that is down may take the read bound."""
        return self.remote is not None and self.remote.contains(block_id)

    def capacity_of(self, tier: str) -> int:
        return self._local(tier).capacity

    def pin(self, tier: str, block_ids: list[int]) -> None:
        """Keep these blocks in `tier` once there, until unpinned (`load_into` brings them)."""
        self._local(tier).pin(block_ids)

    def unpin(self, tier: str, block_ids: list[int]) -> None:
        self._local(tier).unpin(block_ids)

    def pinned_bytes(self, tier: str) -> int:
        """Bytes of pinned blocks `tier` holds now."""
        return self._local(tier).pinned_bytes()

    async def load_into(self, tier: str, block_id: int, expected: int, length: int) -> bool:
        """Read a block through the tiers (verified, not promoted: loading is not a use) so that
        it lands in `tier`; one found in RAM but missing from NVMe is written down when NVMe is
        the target. False when the tier did not keep it (too large for it, or no room beside
        dirty and pinned blocks)."""
        target = self._local(tier)
        data = await self.read(block_id, expected, length, promote=False, priority=Priority.WARMUP)
        if target is self.nvme and not self.nvme.contains(block_id):
            await trio.to_thread.run_sync(self._fill_after_queued, block_id, data)
        return target.contains(block_id)

    def _fill_after_queued(self, block_id: int, data: bytes) -> None:
        """Copy a block to NVMe once the copies queued before it have landed (the read that
        brought it may have queued one, which a copy of its own would only skip)."""
        self.fills.wait_idle(FILL_WAIT_S)
        self._fill(block_id, data)

    # -- readers outside the mount (aifs.bypass): what this node holds, unverified ------------
    # Those readers check every block against its checksum themselves, as the read path does.

    def record_of(self, block_id: int) -> Location | None:
        """The NVMe record that holds the block, for a reader of the segment file itself."""
        location = self.nvme.locate(block_id)
        if location is not None:
            self._count_bytes(self.nvme, location.length)
        return location

    def in_memory(self, block_id: int) -> bytes | None:
        """The RAM tier's copy of the block (a use of it, as a read through the mount is)."""
        data = self.ram.get(block_id)
        if data is not None:
            self._count(self.ram, data)
        return data

    def segment_path(self, number: int) -> Path:
        """The file of NVMe segment `number` (records name their segment by number)."""
        return self.nvme.segment_path(number)

    async def read_local(self, block_ids: list[int]) -> dict[int, bytes]:
        """The copies of these blocks that this node holds: from RAM, else from NVMe in one trip
        to the I/O threads. Blocks in neither tier are left out."""
        found = {}
        on_disk = []
        for block_id in block_ids:
            data = self.in_memory(block_id)
            if data is not None:
                found[block_id] = data
            elif self.nvme.contains(block_id):
                on_disk.append(block_id)
        if on_disk:
            found.update(await self._io_limiter.run(Ticket(Priority.DEMAND), self._read_nvme, on_disk))
        return found

    def _read_nvme(self, block_ids: list[int]) -> dict[int, bytes]:
        found = {}
        for block_id in block_ids:
            data = self.nvme.get(block_id)
            if data is not None:
                self._count(self.nvme, data)
                found[block_id] = data
        return found

    def recover_staged(self, pending: Mapping[int, int]) -> list[int]:
        """After a start, with the pending uploads (block id -> checksum): those stay staged as
        dirty, and blocks staged for a commit that never happened are dropped; returns their ids."""
        return self.nvme.recover(pending)

    def set_peers(self, servers: Iterable[str], local: str) -> None:
        """Follow the live mounts of a shared volume (their block servers; `local`: this one's).
        Without a peers tier there is nothing to follow."""
        if self.peers is not None:
            self.peers.set_servers(servers, local=local)

    async def open_on_loop(self) -> None:
        """Connect ahead what the shared caches' reads on this loop use (best effort)."""
        for tier in self._shared:
            await tier.open_on_loop()

    async def close(self) -> None:
        """Give queued offers a few seconds to reach the servers, then close the shared caches
        and the cold tier."""
        for calls in (self.fills, self.background):
            if calls is not None:
                await trio.to_thread.run_sync(calls.close)
        for tier in self._shared:
            tier.close_on_loop()
            await trio.to_thread.run_sync(tier.close)
        await trio.to_thread.run_sync(self.cold.close)

    def close_staging(self) -> None:
        """Close NVMe staging's files, after everything else: what is staged there stays for the
        next mount."""
        self.nvme.close()
