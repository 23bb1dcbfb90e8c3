"""Answers of a mount's data socket that a reader keeps and reuses without asking again.

An answer with a stamp holds while the mount's change table still shows every counter of the
stamp (aifs.bypass.changes): nothing it was built from (the directories on its path, the file's
attributes and block references) has changed. Its bytes are still read and checked each time,
so a segment record dropped or reused since is noticed: the answer is forgotten and the mount
asked again.
"""

from aifs.bypass.changes import ChangeView
from aifs.client.assemble import Mismatch, assemble
from aifs.client.segments import SegmentFiles

MAX_KEPT = 200_000  # answers per connection; the oldest go first


class Answers:
    def __init__(self, view: ChangeView) -> None:
        self.view = view
        self._kept: dict[bytes, tuple[dict, int]] = {}

    def keep(self, relative: bytes, answer: dict, block_size: int) -> None:
        if "stamp" not in answer:
            return
        self._kept.pop(relative, None)
        self._kept[relative] = (answer, block_size)
        if len(self._kept) > MAX_KEPT:
            del self._kept[next(iter(self._kept))]

    def read(self, relative: bytes, segments: SegmentFiles) -> bytes | None:
        """The file's bytes by a kept answer that still holds; None when the mount must be asked."""
        kept = self._kept.get(relative)
        if kept is None:
            return None
        answer, block_size = kept
        if not self.view.holds(answer["stamp"]):
            del self._kept[relative]
            return None
        try:
            return assemble(answer, block_size, segments)
        except Mismatch:  # the segment was closed here, or its record changed: ask again
            del self._kept[relative]
            return None

    def close(self) -> None:
        self._kept.clear()
        self.view.close()
