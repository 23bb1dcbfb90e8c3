"""Directory listings with offsets that stay valid while entries come and go.

Entries come in name order from a prefix scan. The offset handed to the kernel
is a position in the list of names this handle has already returned; resuming
from offset N continues strictly after the N-th name. So every entry that exists
for the whole listing is returned exactly once, whatever is added or removed.

The first entries of a listing go out with their attributes (readdirplus), fetched
for a batch of names in one engine round trip, so the kernel has them when the
caller stats or opens what it listed; an entry whose inode is gone by then is
skipped, as if it had been removed just before the scan reached it. Past those,
entries go out as name, inode and file type, which the entry itself records: a
listing of a million files then costs a scan, not a million inode reads, and
leaves no million inodes in the kernel; a later stat of such a name is one lookup.
"""

from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple

from aifs.meta import Inode
from aifs.vfs.volume import Volume

DOTS = 2
BATCH = 256  # names whose attributes one engine request fetches


class Entry(NamedTuple):
    name: bytes
    ino: int
    node: Inode | None  # None: the entry goes out without attributes
    kind: int  # its mode, or at least the mode's S_IFMT bits: all the kernel learns without `node`
    next_id: int  # the offset of the entry after it


class DirListing:
    def __init__(self, ino: int, attributed: int) -> None:
        self.ino = ino
        self.attributed = attributed  # entries of the listing that go out with attributes
        self.names: list[bytes] = []  # the names handed out so far, in order

    def entries(self, vol: Volume, start_id: int) -> Iterator[Entry]:
        """The entries from `start_id` on; each counts as handed out unless `unsent` is called."""
        if start_id <= 1:
            node = vol.getattr(self.ino)
            if start_id == 0:
                yield Entry(b".", self.ino, node, node.mode, 1)
            yield Entry(b"..", node.parent, vol.getattr(node.parent), node.mode, DOTS)
        del self.names[max(start_id, DOTS) - DOTS:]
        scan = vol.meta.listing(self.ino, self.names[-1] if self.names else None)
        while chunk := list(islice(scan, BATCH)):
            with_attributes = self.attributed - len(self.names)
            wanted = [ino for i, (_, ino, kind) in enumerate(chunk) if i < with_attributes or kind is None]
            nodes = dict(zip(wanted, vol.getattrs(wanted))) if wanted else {}
            for name, ino, kind in chunk:
                node = nodes.get(ino)
                if node is None and ino in nodes:
                    continue
                self.names.append(name)
                yield Entry(name, ino, node, kind if node is None else node.mode, len(self.names) + DOTS)

    def unsent(self, entry: Entry) -> None:
        """The kernel had no room for this entry: the next request starts with it."""
        if entry.name not in (b".", b".."):
            self.names.pop()
