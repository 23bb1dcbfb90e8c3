"""The state of a regular file while handles have it open: unsealed writes and its live size."""

from collections.abc import Callable
from dataclasses import dataclass

import trio

from aifs.vfs.blockbuffer import BlockBuffer
from aifs.vfs.readahead import Readahead


class OpenFile:
    """Shared by every handle of one inode, so all of them see the same bytes.

    `dirty` holds blocks written but not yet sealed; `unsynced` lists block ids
    staged since the last fsync; `last_block` is the block read last, so that a
    pass reading one block in pieces counts as one use. `lock` orders writes,
    seals and truncates. `readahead` follows the access pattern (None: no readahead);
    `ranged` is the path's rule on small random reads (fetch chunks, or whole blocks), and
    `ranged_blocks` the blocks they touched, which tells a sparse reader from a broad one, and
    `warming` says the whole file is being fetched for such a broad reader.
    `written` says a handle wrote to it since it was opened; `held`, that this node holds it
    open in a shared volume's engine (aifs.meta.sessions).
    """

    def __init__(self, ino: int, size: int) -> None:
        self.ino = ino
        self.size = size
        self.handles = 0
        self.dirty: dict[int, BlockBuffer] = {}
        self.unsynced: list[int] = []
        self.mtime_ns: int | None = None
        self.last_block: int | None = None
        self.readahead: Readahead | None = None
        self.ranged = True  # small random reads may fetch chunks instead of whole blocks
        self.ranged_blocks: set[int] = set()  # blocks small random reads fetched chunks of
        self.warming = False
        self.written = False
        self.held = False
        self.lock = trio.Lock()

    @property
    def dirty_bytes(self) -> int:
        return sum(len(buf) for buf in self.dirty.values())


@dataclass(eq=False)
class Handle:
    """One open() of a file. Whether it wrote decides what its close() does: only a handle that
    wrote seals the file's buffers, so only writers ever see a seal fail (a full staging area).
    `stale_pages`: the file changed since it was last opened on this node, so the kernel's
    cached pages of it must go."""

    file: OpenFile
    wrote: bool = False
    stale_pages: bool = False


class OpenFiles:
    """The table of open files, keyed by inode; it also counts the files being written, so
    background work can tell when the last writer is done."""

    def __init__(self, first_write: Callable[[int], None] = lambda ino: None) -> None:
        """`first_write` hears of each file written to while open, before its first write is
        taken: its newest bytes will be in this mount's buffers, not in the metadata."""
        self._first_write = first_write
        self._files: dict[int, OpenFile] = {}
        self.writing = 0  # open files written to since they were opened
        self.last_writer_closed = float("-inf")  # trio time

    def get(self, ino: int) -> OpenFile | None:
        return self._files.get(ino)

    def acquire(self, ino: int, size: int) -> OpenFile:
        of = self._files.get(ino)
        if of is None:
            of = self._files[ino] = OpenFile(ino, size)
        of.handles += 1
        return of

    def wrote(self, of: OpenFile) -> None:
        if not of.written:
            self._first_write(of.ino)
            of.written = True
            self.writing += 1

    def release(self, of: OpenFile) -> bool:
        """Drop one handle; True when it was the last one."""
        of.handles -= 1
        if of.handles > 0:
            return False
        del self._files[of.ino]
        if of.written:
            self.writing -= 1
            self.last_writer_closed = trio.current_time()
        return True

    def is_open(self, ino: int) -> bool:
        return ino in self._files

    def all(self) -> list[OpenFile]:
        return list(self._files.values())
