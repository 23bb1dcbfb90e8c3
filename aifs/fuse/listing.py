"""Directory listings with offsets that stay valid while entries come and go.

Entries come in name order from a prefix scan. The offset handed to the kernel
is a position in the list of names this handle has already returned; resuming
from offset N continues strictly after the N-th name. So every entry that exists
for the whole listing is returned exactly once, whatever is added or removed.

Every entry goes out with its attributes (readdirplus), fetched for a batch of
names in one engine round trip; an entry whose inode is gone by then is skipped,
as if it had been removed just before the scan reached it.
"""

from collections.abc import Iterator
from itertools import islice

from aifs.meta import Inode
from aifs.vfs.volume import Volume

DOTS = 2
BATCH = 256  # names whose attributes one engine request fetches


class DirListing:
    def __init__(self, ino: int) -> None:
        self.ino = ino
        self.names: list[bytes] = []

    def entries(self, vol: Volume, start_id: int) -> Iterator[tuple[bytes, int, Inode, int]]:
        """(name, inode, attributes, offset of the next entry) from `start_id` on."""
        if start_id <= 1:
            node = vol.getattr(self.ino)
            if start_id == 0:
                yield b".", self.ino, node, 1
            yield b"..", node.parent, vol.getattr(node.parent), DOTS
        position = max(start_id, DOTS)
        del self.names[position - DOTS:]
        after = self.names[-1] if self.names else None
        scan = vol.meta.readdir(self.ino, after)
        while chunk := list(islice(scan, BATCH)):
            for (name, ino), node in zip(chunk, vol.getattrs([ino for _, ino in chunk])):
                if node is not None:
                    position += 1
                    yield name, ino, node, position

    def accepted(self, name: bytes) -> None:
        """The kernel took this entry; remember it so later offsets can resume after it."""
        if name not in (b".", b".."):
            self.names.append(name)
