"""File contents over immutable blocks: reads, buffered writes, sealing, truncation.

Writes gather in per-file block buffers. A buffer is sealed when its block is full
or on flush/fsync/close: a new block id, staged on NVMe, then one metadata commit
of the block refs, the size and the pending uploads (docs/architecture.md).
"""

import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from aifs.errors import FsError
from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.tiers.checksum import Buffer, chunk_span
from aifs.tiers.manager import TierManager
from aifs.vfs.elsewhere import StagedElsewhere
from aifs.vfs.blockbuffer import BlockBuffer, BufferPool
from aifs.vfs.heat import HeatMap
from aifs.vfs.openfile import OpenFile
from aifs.vfs.prefetch import Prefetcher

MAX_DIRTY_PER_FILE = 64 << 20
PROMOTE_HEAT = 2.5  # about three ranged reads of one block within minutes: fetch it whole
# Small random reads that have touched this many of a file's blocks (a 32nd of them, and at
# least 4) read the file broadly: the whole file is fetched in the background (warmed), or
# where it would take more than WARM_MAX_SHARE of NVMe, every block they touch from then on.
BROAD_FRACTION = 1 / 32
BROAD_MIN_BLOCKS = 4
WARM_MAX_SHARE = 1 / 4
WARM_BATCH = 256  # block references looked up at a time while warming


class PageCache(Protocol):
    """The kernel's page cache, as the FUSE layer offers it for the blocks of warmed files."""

    largest_file: int  # bytes: the pages of larger files are left to reads

    async def store(self, inode: int, offset: int, data: memoryview) -> bool:
        """Hand over the file's current bytes at `offset`; whether the page cache took them."""


class FileData:
    def __init__(
        self, meta: MetaEngine, tiers: TierManager, committed: Callable[[int, list[BlockRef]], None],
        prefetch: Prefetcher | None = None, keep_in_ram: Callable[[int], bool] | None = None,
        wait_for_owner_s: float = 0.0,
    ) -> None:
        """`committed` learns of the new blocks of a file once the metadata holds them (to
        upload them, pin them); `prefetch` fetches blocks ahead of sequential readers;
        `keep_in_ram` names the files whose new blocks the RAM tier must hold (pinned there);
        a block staged on another node of a shared volume is waited for `wait_for_owner_s`."""
        self.meta = meta
        self.tiers = tiers
        self._elsewhere = StagedElsewhere(meta, wait_for_owner_s)
        self._committed = committed
        self._keep_in_ram = keep_in_ram or (lambda ino: False)
        self.prefetch = prefetch
        self.heat = HeatMap()
        self.bs = meta.block_size
        self.buffers = BufferPool(self.bs)
        self.page_cache: PageCache | None = None  # set by the FUSE layer

    async def _object(self, ref: BlockRef, promote: bool = True) -> memoryview:
        data = await self._elsewhere.read(
            ref.block_id, lambda: self.tiers.read(ref.block_id, ref.checksum, ref.length, promote))
        return memoryview(data)[ref.offset:ref.offset + ref.length]

    def _spans(self, offset: int, end: int) -> list[tuple[int, int, int]]:
        """(block index, start, end within the block) for each block the range touches."""
        first, last = offset // self.bs, (end - 1) // self.bs
        return [
            (i, max(offset - i * self.bs, 0), min(end - i * self.bs, self.bs))
            for i in range(first, last + 1)
        ]

    async def read(self, ino: int, of: OpenFile | None, size_now: int, offset: int, size: int) -> Buffer:
        end = min(offset + size, size_now)
        if offset >= end:
            return b""
        spans = self._spans(offset, end)
        dirty = of.dirty if of is not None else {}
        # Copied before the first await: a write may grow or seal these buffers meanwhile.
        unsealed = {i: dirty[i].copy(lo, hi) for i, lo, hi in spans if i in dirty}
        refs = self.meta.block_refs(ino, (i for i, _, _ in spans if i not in unsealed))
        self.heat.read(ino, [ref.block_id for ref in refs.values()])
        if of is not None and of.readahead is not None:
            self._read_ahead(of, offset, end, size_now)
        parts = []
        for index, lo, hi in spans:
            if index in unsealed:
                chunk = unsealed[index]
            elif index in refs:
                chunk = await self._read_block(of, refs[index], lo, hi)
            else:
                chunk = b""
            parts.append(chunk)
            if len(chunk) < hi - lo:
                parts.append(bytes(hi - lo - len(chunk)))
        if len(parts) == 1:
            return parts[0]  # a view of one block goes to the kernel without a copy here
        return b"".join(parts)

    def _read_ahead(self, of: OpenFile, offset: int, end: int, size_now: int) -> None:
        """Start background fetches of the blocks a sequential reader will want next.

        Started before the demand read awaits anything, so the demand fetch goes first.
        """
        ahead = of.readahead.access(offset, end, -(-size_now // self.bs))
        if not ahead or self.prefetch is None:
            return
        wanted = [i for i in ahead if i not in of.dirty]
        refs = self.meta.block_refs(of.ino, wanted)
        started, seen = self.prefetch.fetch(list(refs.values()))
        of.readahead.prefetched.update(started)
        if seen < len(refs):  # no room for the rest now: ask again on the next read
            of.readahead.retry_from(list(refs)[seen])

    async def _read_block(self, of: OpenFile | None, ref: BlockRef, lo: int, hi: int) -> bytes | memoryview:
        """Bytes [lo, hi) of a block, from a whole copy or, for a small random read, from
        only the chunks that hold them.

        Only the first read of a block in a pass counts as a re-use for the RAM tier;
        a block fetched ahead was not used yet, so its first read is no re-use either.
        """
        if of is not None and self._wants_range(of, ref, lo, hi):
            broadly = self._read_broadly(of, ref)
            if broadly and not of.warming:
                of.warming = self._warm(of)
            return await self._read_range(ref, lo, hi, broadly=broadly and not of.warming)
        promote = of is None or of.last_block != ref.block_id
        if of is not None:
            if of.readahead is not None and of.readahead.first_read(ref.block_id):
                promote = False
                behind = of.readahead.left_behind(ref.block_id)
                if behind is not None:
                    self.tiers.read_through(behind)
            of.last_block = ref.block_id
        return (await self._object(ref, promote))[lo:hi]

    def _wants_range(self, of: OpenFile, ref: BlockRef, lo: int, hi: int) -> bool:
        """A random read of less than half a block that has chunk checksums, where the
        path's rule allows it (`fetch = "range"`, the default)."""
        random = of.readahead is not None and of.readahead.window == 0
        start, end = chunk_span(lo, min(hi, ref.length), ref.length)
        return random and of.ranged and bool(ref.sums) and end - start <= ref.length // 2

    def _read_broadly(self, of: OpenFile, ref: BlockRef) -> bool:
        """Whether small random reads of this file have spread over enough of its blocks
        that each block they touch is likely to be read again soon."""
        of.ranged_blocks.add(ref.block_id)
        blocks = -(-of.size // self.bs)
        return len(of.ranged_blocks) >= max(BROAD_MIN_BLOCKS, blocks * BROAD_FRACTION)

    def _warm(self, of: OpenFile) -> bool:
        """Start fetching the whole file to NVMe, when NVMe has room enough for it to spare,
        and into the page cache when that would take a file of its size; whether that started."""
        if self.prefetch is None or of.size > self.tiers.capacity_of("nvme") * WARM_MAX_SHARE:
            return False
        blocks = -(-of.size // self.bs)
        to_pages = self.page_cache is not None and of.size <= self.page_cache.largest_file
        return self.prefetch.warm(
            (self.meta.block_refs(of.ino, range(start, min(start + WARM_BATCH, blocks)))
             for start in range(0, blocks, WARM_BATCH)),
            partial(self._landed, of) if to_pages else None)

    async def _landed(self, of: OpenFile, index: int, ref: BlockRef, data: bytes) -> bool:
        """Offer a warmed block to the page cache while a reader holds the file open and the
        block is still the file's; whether the page cache took it."""
        length = min(ref.length, of.size - index * self.bs)
        if not of.handles or length <= 0 or self.meta.block_refs(of.ino, [index]).get(index) != ref:
            return False
        view = memoryview(data)[ref.offset:ref.offset + length]
        return await self.page_cache.store(of.ino, index * self.bs, view)

    async def _read_range(self, ref: BlockRef, lo: int, hi: int, broadly: bool) -> bytes:
        """The range alone. Its whole block is fetched in the background, so that NVMe and
        RAM come to hold it, once the file is being read `broadly` (and not warmed whole) or
        the block itself was read this way often enough (heat-driven promotion)."""
        hi = min(hi, ref.length)
        if lo >= hi:
            return b""
        if self.prefetch is not None and broadly and not self.tiers.holds("nvme", ref.block_id):
            self.prefetch.fetch([ref])
        data = await self._elsewhere.read(ref.block_id, lambda: self.tiers.read_range(
            ref.block_id, ref.length, ref.sums, ref.offset + lo, ref.offset + hi))
        if self.prefetch is not None and self.heat.blocks.value(ref.block_id) >= PROMOTE_HEAT:
            self.prefetch.fetch([ref])
        return data

    async def write(self, of: OpenFile, offset: int, data: bytes) -> None:
        """Copy `data` into the block buffers; seal blocks that became full."""
        view = memoryview(data)
        full = []
        pos = 0
        while pos < len(view):
            index, within = divmod(offset + pos, self.bs)
            count = min(self.bs - within, len(view) - pos)
            buf = await self._buffer(of, index, within, count)
            buf.write(within, view[pos:pos + count])
            if len(buf) == self.bs:
                full.append(index)
            pos += count
        of.size = max(of.size, offset + len(view))
        of.mtime_ns = time.time_ns()
        if of.dirty_bytes > MAX_DIRTY_PER_FILE:
            full = list(of.dirty)
        if full:
            await self.seal(of, full)

    async def _buffer(self, of: OpenFile, index: int, within: int, count: int) -> BlockBuffer:
        buf = of.dirty.get(index)
        if buf is not None:
            return buf
        content: bytes | memoryview = b""
        if within > 0 or count < self.bs:
            ref = self.meta.block_refs(of.ino, [index]).get(index)
            if ref is not None:
                content = await self._object(ref)
        buf = of.dirty[index] = BlockBuffer(self.buffers, content)
        return buf

    async def seal(self, of: OpenFile, indexes: list[int] | None = None) -> None:
        """Turn buffers into immutable blocks and commit them (all buffers when none named)."""
        indexes = list(of.dirty) if indexes is None else indexes
        if not indexes:
            return
        refs = {}
        for index in indexes:
            buf = of.dirty[index]
            buf.truncate(max(of.size - index * self.bs, 0))
            refs[index] = await self._stage_buffer(buf, self._keep_in_ram(of.ino))
            of.unsynced.append(refs[index].block_id)
        try:
            self.meta.commit_blocks(of.ino, refs, of.size, of.mtime_ns)
        except FsError:
            await self._drop_staged(list(refs.values()))
            raise
        self._committed(of.ino, list(refs.values()))
        for index in indexes:
            of.dirty.pop(index).release()

    async def _drop_staged(self, refs: list[BlockRef]) -> None:
        """Blocks staged for a commit the metadata refused (its disk is full): nothing refers
        to them, so they leave the tiers now instead of holding staging room as dirty."""
        if not refs:
            return
        try:
            await self.tiers.delete([ref.block_id for ref in refs])
        except OSError:  # only the durable tier's copy, which no upload ever made, failed to go
            pass

    async def _stage_buffer(self, buf: BlockBuffer, keep: bool) -> BlockRef:
        """Stage a buffer's bytes. A private bytearray itself becomes the block kept in RAM:
        it leaves `dirty` after the commit and is never written again. Pooled memory is
        reused and pieces are large, so RAM gets a copy only when it must `keep` the block;
        otherwise the bytes stay in the page caches of the file and of the NVMe segment."""
        if buf.private:
            return await self._stage([buf.data])
        if keep:
            return await self._stage([b"".join(buf.parts())])
        return await self._stage(buf.parts(), cache=False)

    async def _stage(self, parts: list[bytes | bytearray | memoryview], cache: bool = True) -> BlockRef:
        block_id = self.meta.block_ids.next()
        digest, sums = await self.tiers.stage(block_id, parts, cache)
        return BlockRef(block_id, 0, sum(map(len, parts)), digest, sums)

    async def truncate(self, ino: int, of: OpenFile | None, size: int) -> None:
        """Set the size; the block cut in the middle is rewritten so no stale bytes remain past it."""
        if of is not None:
            for index in [i for i in of.dirty if i * self.bs >= size]:
                of.dirty.pop(index).release()
            await self.seal(of)
        cut = None
        keep = size % self.bs
        if keep:
            index = size // self.bs
            ref = self.meta.block_refs(ino, [index]).get(index)
            if ref is not None and ref.length > keep:
                data = bytes((await self._object(ref))[:keep])
                cut = (index, await self._stage([data]))
                if of is not None:
                    of.unsynced.append(cut[1].block_id)
        try:
            self.meta.truncate(ino, size, cut)
        except FsError:
            await self._drop_staged([cut[1]] if cut is not None else [])
            raise
        if cut is not None:
            self._committed(ino, [cut[1]])
        if of is not None:
            of.size = size
