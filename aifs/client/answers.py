"""Answers of a mount's data socket that a reader keeps and reuses without asking again: its
own, and for a root reader those on the mount's answer board, which any root reader of the
mount asked for (aifs.bypass.board).

An answer with a stamp holds while the mount's change table still shows every counter of the
stamp (aifs.bypass.changes): nothing it was built from (the directories on its path, the file's
attributes and block references) has changed. Its bytes are still read and checked each time,
so a segment record dropped or reused since is noticed: the answer is forgotten and the mount
asked again.
"""

from aifs.bypass.board import BoardView
from aifs.bypass.changes import ChangeView
from aifs.client.assemble import Mismatch, assemble
from aifs.client.segments import SegmentFiles

MAX_KEPT = 200_000  # answers per connection; the oldest go first


class Answers:
    def __init__(self, view: ChangeView, board: BoardView | None) -> None:
        self.view = view
        self.board = board
        self._kept: dict[bytes, tuple[dict, int]] = {}

    def keep(self, relative: bytes, answer: dict, block_size: int) -> None:
        if "stamp" in answer:
            self._kept.pop(relative, None)
            self._hold(relative, (answer, block_size))

    def _hold(self, relative: bytes, kept: tuple[dict, int]) -> None:
        self._kept[relative] = kept
        if len(self._kept) > MAX_KEPT:
            del self._kept[next(iter(self._kept))]  # the least recently read

    def read(self, relative: bytes, segments: SegmentFiles) -> tuple[bytes, bool] | None:
        """The file's bytes by a kept answer that still holds, and whether it was another reader's
        (from the board); None when the mount must be asked."""
        kept = self._kept.pop(relative, None)
        posted = kept is None
        if posted:
            kept = self._posted(relative, segments)
            if kept is None:
                return None
        answer, block_size = kept
        if not self.view.holds(answer["stamp"]):
            return None
        try:
            data = assemble(answer, block_size, segments)
        except Mismatch:  # the segment was closed here, or its record changed: ask again
            return None
        self._hold(relative, kept)
        return data, posted

    def _posted(self, relative: bytes, segments: SegmentFiles) -> tuple[dict, int] | None:
        """An answer on the board whose segments this reader holds (the mount hands over the
        others with its next answer that needs them)."""
        found = self.board.look(relative) if self.board is not None else None
        if found is None or not all(segments.holds(block["segment"]) for block in found[0]["blocks"]):
            return None
        return found

    def close(self) -> None:
        self._kept.clear()
        self.view.close()
        if self.board is not None:
            self.board.close()
