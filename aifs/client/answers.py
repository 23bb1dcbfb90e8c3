"""Answers of a mount's data socket that a reader keeps and reuses without asking again: its
own, and for a root reader those on the mount's answer board, which any root reader of the
mount asked for (aifs.bypass.board).

An answer with a stamp holds while the mount's change table still shows every counter of the
stamp (aifs.bypass.changes): nothing it was built from (the directories on its path, the file's
attributes and block references) has changed. Its bytes are still read and checked each time,
so a segment record dropped or reused since is noticed: the answer is forgotten and the mount
asked again.
"""

from collections.abc import Sequence

from aifs.bypass import _reader
from aifs.bypass.board import BoardView
from aifs.bypass.changes import ChangeView, split
from aifs.client.assemble import Block
from aifs.client.segments import SegmentFiles

MAX_KEPT = 200_000  # answers per connection; the oldest go first

# (size, block_size, blocks, the stamp's counter slots, the values they must show): a tuple of
# numbers and tuples of numbers, which the garbage collector stops tracking. An object or a
# closure per kept answer would be walked by every full collection of the reader's process,
# and a reader keeping many thousands of answers would spend a third of its time there.
Kept = tuple[int, int, tuple[Block, ...], tuple[int, ...], tuple[int, ...]]


class Answers:
    def __init__(self, view: ChangeView, board: BoardView | None) -> None:
        self.view = view
        self.board = board
        self._kept: dict[bytes, Kept] = {}

    def keep(self, relative: bytes, size: int, block_size: int, blocks: tuple[Block, ...],
             stamp: Sequence[int]) -> None:
        self._kept.pop(relative, None)
        self._hold(relative, (size, block_size, blocks, *split(stamp)))

    def _hold(self, relative: bytes, kept: Kept) -> None:
        self._kept[relative] = kept
        if len(self._kept) > MAX_KEPT:
            del self._kept[next(iter(self._kept))]

    def read(self, relative: bytes, segments: SegmentFiles) -> tuple[bytes, bool] | None:
        """The file's bytes by a kept answer that still holds, and whether it was another reader's
        (from the board); None when the mount must be asked. A board answer naming a segment
        this reader was not handed fails its checksum like any other: the mount hands that
        segment over with its next answer that needs it."""
        kept = self._kept.get(relative)
        posted = kept is None
        if posted:
            kept = self.board.look(relative) if self.board is not None else None
            if kept is None:
                return None
        # None when the answer no longer holds, or its bytes do not match (the segment was
        # closed here, or its record changed)
        data = _reader.read(kept, self.view.map, segments.fds)
        if data is None:
            self._kept.pop(relative, None)
            return None
        if posted:
            self._hold(relative, kept)
        return data, posted

    def close(self) -> None:
        self._kept.clear()
        self.view.close()
        if self.board is not None:
            self.board.close()
