"""One reply of the data socket: where each file's blocks are on this node.

A root caller gets NVMe records as (segment, offset) with the segment's descriptor, once per
connection, and reads them itself; anyone else gets the bytes inline, read here off the event
loop: a segment holds other files' blocks too, so its descriptor would let them read those. A
block in RAM only goes inline for everyone. A file any of whose blocks this node does not hold,
or that is being written here, is a fallback: read through the mount, which fetches and caches it.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from aifs.bypass.protocol import MAX_FDS
from aifs.bypass.resolve import Fallback
from aifs.meta import Inode
from aifs.meta.attrs import BlockRef
from aifs.vfs.volume import Volume

INLINE_FILE_MAX = 8 << 20  # a larger file read inline is read through the mount instead
INLINE_REPLY_MAX = 32 << 20  # past this, the rest of a request is answered "again"
FILE_BLOCKS_MAX = 1024  # a larger file is read through the mount, in large requests, anyway


@dataclass
class Segments:
    """The segment descriptors a connection's reader holds, and those this reply hands it."""

    held: set[int] = field(default_factory=set)
    new: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def usable(self, number: int, path_of: Callable[[int], os.PathLike]) -> bool:
        """Whether the reader has, or gets with this reply, the descriptor of segment `number`."""
        if number in self.held:
            return True
        if len(self.fds) >= MAX_FDS:
            return False
        try:
            fd = os.open(path_of(number), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # dropped since the record was found: its blocks go inline
            return False
        self.held.add(number)
        self.new.append(number)
        self.fds.append(fd)
        return True

    def sent(self) -> None:
        """The reply has gone (or failed): the reader holds its own copies of the descriptors."""
        for fd in self.fds:
            os.close(fd)
        self.new, self.fds = [], []


class Reply:
    """The file answers of one reply, built path by path; `fill` then reads the inline bytes."""

    def __init__(self, volume: Volume, segments: Segments, by_descriptor: bool) -> None:
        self.vol = volume
        self.segments = segments
        self.by_descriptor = by_descriptor
        self._inline: list[tuple[dict, dict, int]] = []  # (answer, block, block id) waiting for bytes
        self._inline_bytes = 0

    @property
    def full(self) -> bool:
        return self._inline_bytes >= INLINE_REPLY_MAX

    def add_file(self, ino: int, node: Inode) -> dict:
        """The answer for a file the caller may read: its blocks, or a Fallback raised."""
        self.vol.sample_order.touched(ino)
        of = self.vol.files.get(ino)
        if of is not None and (of.written or of.dirty):
            raise Fallback("open for writing on this node")
        count = -(-node.size // self.vol.meta.block_size)
        if count > FILE_BLOCKS_MAX:
            raise Fallback(f"more than {FILE_BLOCKS_MAX} blocks")
        refs = self.vol.meta.block_refs(ino, range(count))
        answer: dict = {"size": node.size, "blocks": []}
        inline = []
        for index, ref in refs.items():
            block = {"index": index, "checksum": ref.checksum, "offset": ref.offset, "length": ref.length}
            if not self._by_record(block, ref):
                inline.append((block, ref))
            answer["blocks"].append(block)
        self._queue_inline(answer, inline)
        return answer

    def _by_record(self, block: dict, ref: BlockRef) -> bool:
        """Point a root reader at the block's NVMe record; False when it gets the bytes inline."""
        if not self.by_descriptor:
            return False
        location = self.vol.tiers.record_of(ref.block_id)
        if location is None or not self.segments.usable(location.segment, self.vol.tiers.segment_path):
            return False
        block.update(segment=location.segment, at=location.offset, object=location.length)
        return True

    def _queue_inline(self, answer: dict, inline: list[tuple[dict, BlockRef]]) -> None:
        tiers = self.vol.tiers
        if any(not tiers.holds("ram", ref.block_id) and not tiers.holds("nvme", ref.block_id) for _, ref in inline):
            raise Fallback("not on this node")
        nbytes = sum(ref.length for _, ref in inline)
        if nbytes > INLINE_FILE_MAX:
            raise Fallback(f"more than {INLINE_FILE_MAX >> 20} MiB to send inline")
        self._inline_bytes += nbytes
        self._inline += [(answer, block, ref.block_id) for block, ref in inline]

    async def fill(self) -> None:
        """Read the inline blocks (RAM, else NVMe on the I/O threads); a file one of whose blocks
        left this node meanwhile becomes a fallback."""
        found = await self.vol.tiers.read_local([block_id for _, _, block_id in self._inline])
        for answer, block, block_id in self._inline:
            data = found.get(block_id)
            if data is None:
                answer.clear()
                answer["fallback"] = "not on this node"
            elif "size" in answer:
                block["data"] = data
