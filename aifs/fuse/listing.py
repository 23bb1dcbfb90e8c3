"""Directory listings with offsets that stay valid while entries come and go.

Entries come in name order from a prefix scan. The offset handed to the kernel
is a position in the list of names this handle has already returned; resuming
from offset N continues strictly after the N-th name. So every entry that exists
for the whole listing is returned exactly once, whatever is added or removed.
"""

from collections.abc import Iterator

from aifs.meta import MetaEngine

DOTS = 2


class DirListing:
    def __init__(self, ino: int) -> None:
        self.ino = ino
        self.names: list[bytes] = []

    def entries(self, meta: MetaEngine, start_id: int) -> Iterator[tuple[bytes, int, int]]:
        """(name, inode, offset of the next entry) from `start_id` on."""
        if start_id == 0:
            yield b".", self.ino, 1
        if start_id <= 1:
            yield b"..", meta.getattr(self.ino).parent, DOTS
        position = max(start_id, DOTS)
        del self.names[position - DOTS:]
        after = self.names[-1] if self.names else None
        for name, ino in meta.readdir(self.ino, after):
            position += 1
            yield name, ino, position

    def accepted(self, name: bytes) -> None:
        """The kernel took this entry; remember it so later offsets can resume after it."""
        if name not in (b".", b".."):
            self.names.append(name)
