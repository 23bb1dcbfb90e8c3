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

from aifs.meta import Inode
from aifs.vfs.volume import Volume

DOTS = 2
BATCH = 256  # names whose attributes one engine request fetches


# (name, inode, its attributes or None to go out without them, its mode or at least the
# mode's S_IFMT bits (all the kernel learns without attributes), the offset of the entry
# after it): a plain tuple, since a listing makes one per name and a named tuple costs a
# Python-level constructor call each
Entry = tuple[bytes, int, Inode | None, int, int]


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
                yield b".", self.ino, node, node.mode, 1
            yield b"..", node.parent, vol.getattr(node.parent), node.mode, DOTS
        del self.names[max(start_id, DOTS) - DOTS:]
        scan = vol.meta.listing(self.ino, self.names[-1] if self.names else None)
        names = self.names
        while chunk := list(islice(scan, BATCH)):
            nodes = self._attributes(vol, chunk)
            for name, ino, kind in chunk:
                node = nodes.get(ino)
                if node is None and ino in nodes:
                    continue
                names.append(name)
                yield name, ino, node, kind if node is None else node.mode, len(names) + DOTS

    def _attributes(self, vol: Volume, chunk: list[tuple[bytes, int, int | None]]) -> dict[int, Inode | None]:
        """The attributes of the chunk's entries that go out with them (None: the inode is
        gone), by inode; empty when none does, as past the first entries of a listing."""
        with_attributes = self.attributed - len(self.names)
        wanted = [ino for i, (_, ino, kind) in enumerate(chunk) if i < with_attributes or kind is None]
        return dict(zip(wanted, vol.getattrs(wanted))) if wanted else {}

    def unsent(self, entry: Entry) -> None:
        """The kernel had no room for this entry: the next request starts with it."""
        if entry[0] not in (b".", b".."):
            self.names.pop()
