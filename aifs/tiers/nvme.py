"""NVMe tier: blocks in append-only segments on a local disk; read cache and write-back staging.

A dirty block (not yet in the cold tier) is never evicted, nor is a pinned one:
only blocks in the clean LRU are eviction candidates. The index of what is
held is rebuilt from the segments at start; which blocks are dirty is told by
the metadata's pending-upload queue, which also settles damaged segments: a
record past a damaged header is trusted, or a damaged one recovered, only when
its bytes match the checksum of a block waiting for upload (aifs.tiers.salvage).

The configured capacity is a budget, not a promise of the disk: the tier never
counts on more room than what it holds plus what its file system has free, and
a full disk (ENOSPC) makes it evict clean blocks and try again.
"""

import errno
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from aifs.tiers.checksum import Buffer, checksum
from aifs.tiers.segments import DamagedRegion, Found, Location, Salvage, SegmentLog

log = logging.getLogger(__name__)

FULL_DISK_TRIES = 3  # appends of one block that may meet a full disk before it counts as no room
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class StagingFull(Exception):
    """No room for a dirty block even after evicting every clean one."""


class NvmeTier:
    name = "nvme"

    def __init__(self, root: Path, capacity: int, max_dirty: int | None = None, read_only: bool = False) -> None:
        """`read_only` (fsck without --repair) changes nothing on disk: see SegmentLog."""
        self.root = root
        self.configured_capacity = self.capacity = capacity
        self._max_dirty = capacity if max_dirty is None else max_dirty
        self.max_dirty = min(self._max_dirty, capacity)
        self._log = SegmentLog(root, bypass_cache=True, read_only=read_only)
        self._index: dict[int, Location] = {}
        self._clean: OrderedDict[int, None] = OrderedDict()
        self._dirty: set[int] = set()
        self._dirty_bytes = 0
        self._pinned: set[int] = set()
        self._used = 0
        self._lock = threading.RLock()
        self._unconfirmed: set[int] = set()  # staged before a crash; recover() sorts them out
        self._landing: dict[int, bool] = {}  # being appended, and still wanted (not deleted meanwhile)
        for block_id, location, staged in self._log.rebuild():
            self._remember(block_id, location)
            if staged:
                self._unconfirmed.add(block_id)
        if not read_only:
            self._fit_to_disk()

    def _remember(self, block_id: int, location: Location) -> None:
        old = self._index.pop(block_id, None)
        if old is not None:
            self._forget(old)
        self._index[block_id] = location
        if block_id not in self._pinned:
            self._clean[block_id] = None
        self._used += location.length

    def _forget(self, location: Location) -> None:
        self._used -= location.length
        self._log.kill(location)

    def get(self, block_id: int) -> bytes | None:
        return self.get_range(block_id, 0, None)

    def get_range(self, block_id: int, offset: int, length: int | None) -> bytes | None:
        """Bytes [offset, offset + length) of a block (to its end with None)."""
        with self._lock:
            location = self._index.get(block_id)
            if location is None:
                return None
            if block_id in self._clean:
                self._clean.move_to_end(block_id)
        try:
            return self._log.read(location, offset, length)
        except (OSError, KeyError) as e:
            log.warning("block %016x vanished from NVMe while being read: %s", block_id, e)
            return None

    def locate(self, block_id: int) -> Location | None:
        """Where the block's record sits, for a reader of the segment file itself; a use, as a get is."""
        with self._lock:
            location = self._index.get(block_id)
            if location is not None and block_id in self._clean:
                self._clean.move_to_end(block_id)
            return location

    def read_into(self, block_id: int, buf: bytearray) -> bool:
        """The whole block into `buf` (resized to it); False when it is not here."""
        with self._lock:
            location = self._index.get(block_id)
        if location is None:
            return False
        try:
            self._log.read_into(location, buf)
        except (OSError, KeyError) as e:
            log.warning("block %016x vanished from NVMe while being read: %s", block_id, e)
            return False
        return True

    def put(self, block_id: int, data: Buffer | list[Buffer], dirty: bool = False) -> None:
        """Store a block (its bytes, or parts to join); a clean block that finds no room is
        simply not cached.

        Its room is reserved under the lock and the bytes are appended outside it, so
        reads of other blocks (some of them on the event loop) never wait for a disk write.
        A put of a block that another thread is writing returns at once: until that write
        ends, the block reads as a miss here and comes from the tier below.
        """
        parts = data if isinstance(data, list) else [data]
        size = sum(map(len, parts))
        for _ in range(FULL_DISK_TRIES):
            with self._lock:
                if block_id in self._index or block_id in self._landing or not self._reserve(size, dirty):
                    return
                self._landing[block_id] = True
            try:
                self._land([(block_id, parts, size)], dirty, around_cache=False)
                return
            except OSError as e:
                if e.errno not in _DISK_FULL:
                    raise
                self._fit_to_disk(e)
        if dirty:
            raise StagingFull(f"the file system of {self.root} has no room for a block of {size} bytes, "
                              "even after evicting clean blocks")

    def fill(self, blocks: list[tuple[int, Buffer]]) -> None:
        """Cache clean blocks just read from below, appended together around the page cache:
        their reader holds them in memory already (RAM, the kernel's cache of the mount).
        Those here or on their way already, and those that find no room, are skipped; a full
        disk leaves the rest uncached."""
        landing = []
        with self._lock:
            for block_id, data in blocks:
                if block_id in self._index or block_id in self._landing or not self._reserve(len(data), False):
                    continue
                self._landing[block_id] = True
                landing.append((block_id, [data], len(data)))
        if not landing:
            return
        try:
            self._land(landing, dirty=False, around_cache=True)
        except OSError as e:
            if e.errno not in _DISK_FULL:
                raise
            self._fit_to_disk(e)

    def _land(self, blocks: list[tuple[int, list[Buffer], int]], dirty: bool, around_cache: bool) -> None:
        """Append blocks (id, parts, size) whose room is reserved, and index each unless it
        was deleted meanwhile."""
        locations: list[Location] = []
        try:
            while len(locations) < len(blocks):
                run = [(block_id, parts) for block_id, parts, _ in blocks[len(locations):]]
                locations += self._log.append_run(run, staged=dirty, around_cache=around_cache)
        finally:
            with self._lock:
                for i, (block_id, _, size) in enumerate(blocks):
                    self._landed(block_id, size, dirty, locations[i] if i < len(locations) else None)

    def _landed(self, block_id: int, size: int, dirty: bool, location: Location | None) -> None:
        """Settle one block's append (None: it failed); the caller holds the lock."""
        wanted = self._landing.pop(block_id)
        self._used -= size
        self._dirty_bytes -= size if dirty else 0
        if location is not None and wanted:
            self._remember(block_id, location)
            if dirty:
                self.mark_dirty(block_id)
        elif location is not None:  # deleted while it was being written
            self._log.kill(location)

    def _reserve(self, size: int, dirty: bool) -> bool:
        """Count `size` bytes (dirty ones too) as used before they are written; False when a
        clean block finds no room. The caller holds the lock."""
        if dirty and self._dirty_bytes + size > self.max_dirty:
            limit = "writeback.max_dirty" if self.max_dirty == self._max_dirty else "what its disk has room for"
            raise StagingFull(f"NVMe staging holds {self._dirty_bytes} dirty bytes, "
                              f"the most allowed is {self.max_dirty} ({limit})")
        if not self._make_room(size):
            if dirty:
                raise StagingFull(f"NVMe staging holds {self._used} of {self.capacity} bytes, all dirty")
            return False
        self._used += size
        self._dirty_bytes += size if dirty else 0
        return True

    def _fit_to_disk(self, error: OSError | None = None) -> None:
        """Set the capacity to what the file system really has room for (what the tier holds
        plus what is free), never above the configured one: at open, when that is less, and
        whenever an append met a full disk (`error`)."""
        disk = os.statvfs(self.root)
        free = disk.f_bavail * disk.f_frsize
        with self._lock:
            room = min(self.configured_capacity, self._used + free)
            if room == self.capacity or (error is None and room > self.capacity):
                return
            if error is None:
                log.warning("NVMe tier %s: capacity is %d bytes in the config, but its file system has room "
                            "for only %d (%d held, %d free); using %d", self.root, self.configured_capacity,
                            room, self._used, free, room)
            else:
                log.warning("NVMe tier %s: the disk is full (%s); capacity now %d bytes, was %d (%d held, "
                            "%d free): clean blocks are evicted to make room", self.root,
                            error.strerror or error, room, self.capacity, self._used, free)
            self.capacity = room
            self.max_dirty = min(self._max_dirty, room)

    def _make_room(self, size: int) -> bool:
        if self._used + size <= self.capacity:
            return True
        while self._used + size > self.capacity:
            if not self._clean:
                return False
            self.delete(next(iter(self._clean)))
        return True

    def mark_dirty(self, block_id: int) -> None:
        with self._lock:
            if block_id in self._index and block_id not in self._dirty:
                self._dirty.add(block_id)
                self._dirty_bytes += self._index[block_id].length
                self._clean.pop(block_id, None)

    def mark_clean(self, block_id: int) -> None:
        """The block is durable below: evictable, and its record confirmed on disk (this
        happens before its pending upload leaves the metadata, see recover())."""
        with self._lock:
            if block_id in self._dirty:
                self._undirty(block_id)
                self._log.set_live(self._index[block_id])
                if block_id not in self._pinned:
                    self._clean[block_id] = None

    def _undirty(self, block_id: int) -> None:
        self._dirty.discard(block_id)
        self._dirty_bytes -= self._index[block_id].length

    def recover(self, pending: Mapping[int, int]) -> list[int]:
        """After a start, with the pending uploads (block id -> checksum): damaged segments are
        settled (see _mend), blocks with a pending upload are dirty; a record still staged
        without one was written for a commit that never happened (the daemon died between
        the two), so nothing refers to it and it is dropped. Returns the ids dropped."""
        if self._log.damaged:
            self._mend(pending)
        for block_id in pending:
            self.mark_dirty(block_id)
        dropped = sorted(self._unconfirmed - pending.keys())
        for block_id in dropped:
            self.delete(block_id)
        self._unconfirmed.clear()
        return dropped

    @property
    def damaged(self) -> bool:
        """Whether damaged segment records wait for salvage()."""
        return self._log.damaged

    def salvage(self, wanted: Mapping[int, int], lengths: Mapping[int, int] | None = None) -> Salvage:
        """Settle damaged segments against the blocks the metadata still needs from this tier
        (`wanted`: id -> checksum; `lengths` by id where known): the records trusted or
        recovered are indexed (never in place of a copy held), and returned with the damaged
        regions left, for the caller to rewrite headers and neutralise regions."""
        with self._lock:
            salvage = self._log.settle(lambda found: self._matches(found, wanted), wanted, lengths or {},
                                       self._index)
            for found in salvage.records + salvage.recovered:
                self._remember(found.block_id, found.location)
                if found.staged:
                    self._unconfirmed.add(found.block_id)
        return salvage

    def _matches(self, found: Found, wanted: Mapping[int, int]) -> bool:
        expected = wanted.get(found.block_id)
        return expected is not None and checksum(self._log.read(found.location)) == expected

    def rewrite_header(self, found: Found) -> None:
        self._log.rewrite_header(found)

    def segment_path(self, number: int) -> Path:
        return self._log.segment_path(number)

    def neutralise(self, region: DamagedRegion) -> str:
        return self._log.neutralise(region)

    def _mend(self, pending: Mapping[int, int]) -> None:
        """At mount: recovered records get their headers back; a damaged region is neutralised
        unless its header names a pending block that is still missing, which is lost here
        and left in place for fsck to name by file."""
        salvage = self.salvage(pending)
        for found in salvage.recovered:
            self._log.rewrite_header(found)
            log.warning("NVMe tier: recovered block %016x, waiting for upload, whose record header in %s "
                        "at offset %d was damaged (its bytes match its checksum)", found.block_id,
                        self.segment_path(found.location.segment), found.location.header_offset)
        missing = {block_id for block_id in pending if block_id not in self._index}
        for region in salvage.regions:
            if region.says_block in missing:
                missing.discard(region.says_block)
                log.error("NVMe tier %s: block %016x, waiting for upload, is lost: its record in %s is damaged "
                          "and its bytes do not match its checksum; left in place (aifs fsck names the file)",
                          self.root, region.says_block, region.describe())
            else:
                done = self._log.neutralise(region)
                log.warning("NVMe tier %s: damaged bytes %s held no block waiting for upload: %s",
                            self.root, region.describe(), done)
        for block_id in sorted(missing):
            log.error("NVMe tier %s: block %016x, waiting for upload, is in no record left after damage "
                      "to its segments; it is lost (aifs fsck names the file)", self.root, block_id)

    def pin(self, block_ids: list[int]) -> None:
        """Never evict these blocks once they are here (also those stored later)."""
        with self._lock:
            for block_id in block_ids:
                self._pinned.add(block_id)
                self._clean.pop(block_id, None)

    def unpin(self, block_ids: list[int]) -> None:
        with self._lock:
            for block_id in block_ids:
                self._pinned.discard(block_id)
                if block_id in self._index and block_id not in self._dirty:
                    self._clean[block_id] = None

    def is_pinned(self, block_id: int) -> bool:
        return block_id in self._pinned

    def pinned_bytes(self) -> int:
        """Bytes of pinned blocks held now."""
        with self._lock:
            return self.bytes_of([b for b in self._pinned if b in self._index])

    def is_dirty(self, block_id: int) -> bool:
        return block_id in self._dirty

    def sync(self, block_ids: list[int]) -> None:
        """Make staged blocks survive power loss: one fsync per segment they sit in."""
        with self._lock:
            segments = {self._index[b].segment for b in block_ids if b in self._index}
        self._log.sync(segments)

    def delete(self, block_id: int) -> None:
        with self._lock:
            if block_id in self._landing:
                self._landing[block_id] = False
            if block_id in self._dirty:
                self._undirty(block_id)
            location = self._index.pop(block_id, None)
            self._clean.pop(block_id, None)  # a pin outlives the copy: a rotten copy refetched stays pinned
            if location is not None:
                self._forget(location)

    def bytes_of(self, block_ids: list[int]) -> int:
        """Bytes these blocks take here (0 for blocks not held)."""
        index = self._index
        return sum(index[b].length for b in block_ids if b in index)

    def contains(self, block_id: int) -> bool:
        return block_id in self._index

    def used(self) -> int:
        return self._used

    def dirty_bytes(self) -> int:
        return self._dirty_bytes

    def block_ids(self) -> list[int]:
        with self._lock:
            return list(self._index)

    def close(self) -> None:
        self._log.close()
