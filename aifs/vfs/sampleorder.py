"""One reader's hinted order of files and how far it has read: which positions the window
takes in next, and which the reader has left behind.

An order may be millions of files long, so a plan keeps it as 8 bytes a file and indexes by
inode only a span around the reader: from `files_ahead` behind its furthest read to
FOLLOW_SLACK past its window. A read is matched to the first position of its file in that
span that was not read yet; a read of a file the span does not hold is not this reader's (or
the reader jumped, and its next hint says where it is now).

Readers in several processes (DataLoader workers) read a little out of order, so the cursor is
the furthest position read, and a file stays in the plan until the cursor is `files_ahead`
past it: a read that lands a little behind still finds it.
"""

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import trio

from aifs.meta.attrs import BlockRef

FOLLOW_SLACK = 4096  # positions past the window at which a read is still matched to the plan


@dataclass
class FileFetch:
    """The fetch of one file of a plan: the blocks this node lacked when the window reached it."""

    ino: int
    refs: list[BlockRef]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    fetched: int = 0  # blocks done, in order
    finished: bool = False
    failed: bool = False
    read: bool = False

    @property
    def nbytes(self) -> int:
        return sum(ref.length for ref in self.refs)

    @property
    def fetched_bytes(self) -> int:
        return sum(ref.length for ref in self.refs[:self.fetched])


class Plan:
    def __init__(self, reader: str, inodes: Sequence[int], files_ahead: int, bytes_ahead: int,
                 now: float) -> None:
        self.reader = reader
        self.inodes = array("Q", inodes)
        self.files_ahead = files_ahead
        self.bytes_ahead = bytes_ahead
        self.active = now  # when the reader last hinted or read
        self.cursor = -1  # the furthest position read
        self.window_end = -1  # the last position the window has taken in
        self.ahead_bytes = 0  # bytes of the fetches past the cursor
        self.fetches: dict[int, FileFetch] = {}  # by position, from `files_ahead` behind the cursor on
        self._index: dict[int, list[int]] = {}  # inode -> its positions in the span, ascending
        self._span = (0, -1)  # first and last position indexed
        self._read: set[int] = set()  # positions in the span read already
        self._follow()

    def __len__(self) -> int:
        return len(self.inodes)

    def window(self) -> Iterator[int]:
        """Positions the window may take in next, in order: up to `files_ahead` past the cursor."""
        return iter(range(self.window_end + 1, min(self.cursor + self.files_ahead, len(self) - 1) + 1))

    def room_for(self, nbytes: int) -> bool:
        return self.ahead_bytes + nbytes <= self.bytes_ahead

    def take(self, position: int, fetch: FileFetch) -> None:
        """The window reaches `position`; `fetch` brings what this node lacks of its file."""
        self.fetches[position] = fetch
        self.window_end = position
        self.ahead_bytes += fetch.nbytes

    def read(self, ino: int) -> int | None:
        """Record a read of `ino`: the position it was matched to, or None when the span holds
        no unread position of it. A read past the cursor moves the cursor there."""
        position = next((p for p in self._index.get(ino, ()) if p not in self._read), None)
        if position is None:
            return None
        self._read.add(position)
        if position in self.fetches:
            self.fetches[position].read = True
        if position > self.cursor:
            self._advance(position)
        return position

    def _advance(self, position: int) -> None:
        """The reader is at `position` now: the files it passed count no more against its bytes."""
        for passed in range(self.cursor + 1, min(position, self.window_end) + 1):
            fetch = self.fetches.get(passed)
            if fetch is not None:
                self.ahead_bytes -= fetch.nbytes
        self.cursor = position
        self.window_end = max(self.window_end, position)

    def left_behind(self) -> list[FileFetch]:
        """Drop the positions the cursor is more than `files_ahead` past; their fetches."""
        first, last = self._span
        keep_from = min(self.cursor - self.files_ahead, last + 1)
        dropped = []
        for position in range(first, keep_from):
            fetch = self.fetches.pop(position, None)
            if fetch is not None:
                dropped.append(fetch)
            self._read.discard(position)
            positions = self._index[self.inodes[position]]
            positions.remove(position)
            if not positions:
                del self._index[self.inodes[position]]
        self._span = (max(first, keep_from), last)
        self._follow()
        return dropped

    def _follow(self) -> None:
        """Index the positions up to FOLLOW_SLACK past the window."""
        first, last = self._span
        end = min(self.cursor + self.files_ahead + FOLLOW_SLACK, len(self) - 1)
        for position in range(last + 1, end + 1):
            self._index.setdefault(self.inodes[position], []).append(position)
        self._span = (first, max(last, end))
