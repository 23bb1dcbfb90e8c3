"""Answers of a mount's data socket that a reader keeps and reuses without asking again: its
own, and for a root reader those on the mount's answer board, which any root reader of the
mount asked for (aifs.bypass.board).

An answer with a stamp holds while the mount's change table still shows every counter of the
stamp (aifs.bypass.changes): nothing it was built from (the directories on its path, the file's
attributes and block references) has changed. Its bytes are still read and checked each time,
so a segment record dropped or reused since is noticed: the answer is forgotten and the mount
asked again.
"""

from collections.abc import Callable, Sequence
from functools import partial

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
    """`read(relative)`: the file's bytes by a kept answer that still holds, and whether it
    was another reader's (from the board); None when the mount must be asked. An answer that
    no longer holds (its stamp moved, or its bytes do not match: the segment was closed here,
    or its record changed) is forgotten. A board answer naming a segment this reader was not
    handed fails its checksum like any other: the mount hands that segment over with its next
    answer that needs it. A posted answer that holds is kept as the reader's own. `read` is
    the C function bound to this connection's tables (aifs/bypass/_reader.c): it runs for
    every file read, and a Python method around it made every such read measurably slower."""

    def __init__(self, view: ChangeView, board: BoardView | None, segments: SegmentFiles) -> None:
        self.view = view
        self.board = board
        self._kept: dict[bytes, Kept] = {}
        layout = (board.map, board.layout.slots, board.layout.ring_at) if board is not None else (None, 0, 0)
        self.read: Callable[[bytes], tuple[bytes, bool] | None] = partial(
            _reader.answer, self._kept, *layout, view.map, segments.fds, MAX_KEPT)

    def keep(self, relative: bytes, size: int, block_size: int, blocks: tuple[Block, ...],
             stamp: Sequence[int]) -> None:
        self._kept.pop(relative, None)
        _reader.hold(self._kept, relative, (size, block_size, blocks, *split(stamp)), MAX_KEPT)

    def close(self) -> None:
        self._kept.clear()
        self.view.close()
        if self.board is not None:
            self.board.close()
