"""File contents over immutable blocks: reads, buffered writes, sealing, truncation.

Writes gather in per-file block buffers. A buffer is sealed when its block is full
or on flush/fsync/close: a new block id, staged on NVMe, then one metadata commit
of the block refs, the size and the pending uploads (DESIGN section 4).
"""

import time
from collections.abc import Callable

from aifs.meta import MetaEngine
from aifs.meta.attrs import BlockRef
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import TierManager
from aifs.vfs.openfile import OpenFile

MAX_DIRTY_PER_FILE = 64 << 20


class FileData:
    def __init__(self, meta: MetaEngine, tiers: TierManager, staged: Callable[[list[int]], None]) -> None:
        self.meta = meta
        self.tiers = tiers
        self._staged = staged
        self.bs = meta.block_size

    async def _object(self, ref: BlockRef) -> memoryview:
        data = await self.tiers.read(ref.block_id, ref.checksum, ref.length)
        return memoryview(data)[ref.offset:ref.offset + ref.length]

    async def read(self, ino: int, of: OpenFile | None, size_now: int, offset: int, size: int) -> bytes:
        end = min(offset + size, size_now)
        if offset >= end:
            return b""
        first, last = offset // self.bs, (end - 1) // self.bs
        dirty = of.dirty if of is not None else {}
        refs = self.meta.block_refs(ino, (i for i in range(first, last + 1) if i not in dirty))
        parts = []
        for index in range(first, last + 1):
            lo = max(offset - index * self.bs, 0)
            hi = min(end - index * self.bs, self.bs)
            if index in dirty:
                source = memoryview(dirty[index])
            elif index in refs:
                source = await self._object(refs[index])
            else:
                source = memoryview(b"")
            chunk = source[lo:hi]
            parts.append(chunk)
            if len(chunk) < hi - lo:
                parts.append(bytes(hi - lo - len(chunk)))
        return b"".join(parts)

    async def write(self, of: OpenFile, offset: int, data: bytes) -> None:
        """Copy `data` into the block buffers; seal blocks that became full."""
        view = memoryview(data)
        full = []
        pos = 0
        while pos < len(view):
            index, within = divmod(offset + pos, self.bs)
            count = min(self.bs - within, len(view) - pos)
            buf = await self._buffer(of, index, within, count)
            if len(buf) < within:
                buf.extend(bytes(within - len(buf)))
            buf[within:within + count] = view[pos:pos + count]
            if len(buf) == self.bs:
                full.append(index)
            pos += count
        of.size = max(of.size, offset + len(view))
        of.mtime_ns = time.time_ns()
        if of.dirty_bytes > MAX_DIRTY_PER_FILE:
            full = list(of.dirty)
        if full:
            await self.seal(of, full)

    async def _buffer(self, of: OpenFile, index: int, within: int, count: int) -> bytearray:
        buf = of.dirty.get(index)
        if buf is not None:
            return buf
        buf = bytearray()
        if within > 0 or count < self.bs:
            ref = self.meta.block_refs(of.ino, [index]).get(index)
            if ref is not None:
                buf[:] = await self._object(ref)
        of.dirty[index] = buf
        return buf

    async def seal(self, of: OpenFile, indexes: list[int] | None = None) -> None:
        """Turn buffers into immutable blocks and commit them (all buffers when none named)."""
        indexes = list(of.dirty) if indexes is None else indexes
        if not indexes:
            return
        refs = {}
        for index in indexes:
            data = bytes(of.dirty[index][: max(of.size - index * self.bs, 0)])
            refs[index] = await self._stage(data)
            of.unsynced.append(refs[index].block_id)
        self.meta.commit_blocks(of.ino, refs, of.size, of.mtime_ns)
        self._staged([ref.block_id for ref in refs.values()])
        for index in indexes:
            del of.dirty[index]

    async def _stage(self, data: bytes) -> BlockRef:
        block_id = self.meta.block_ids.next()
        await self.tiers.stage(block_id, data)
        return BlockRef(block_id, 0, len(data), checksum(data))

    async def truncate(self, ino: int, of: OpenFile | None, size: int) -> None:
        """Set the size; the block cut in the middle is rewritten so no stale bytes remain past it."""
        if of is not None:
            for index in [i for i in of.dirty if i * self.bs >= size]:
                del of.dirty[index]
            await self.seal(of)
        cut = None
        keep = size % self.bs
        if keep:
            index = size // self.bs
            ref = self.meta.block_refs(ino, [index]).get(index)
            if ref is not None and ref.length > keep:
                data = bytes((await self._object(ref))[:keep])
                cut = (index, await self._stage(data))
                if of is not None:
                    of.unsynced.append(cut[1].block_id)
        self.meta.truncate(ino, size, cut)
        if cut is not None:
            self._staged([cut[1].block_id])
        if of is not None:
            of.size = size
