"""The change table: counters in shared memory that let a reader of the data socket reuse an
answer without asking the mount again, for as long as nothing it was built from changed.

An answer depends on a few metadata keys (the entries and attributes of the directories on its
path, the file's attributes and block references, their ACLs). An entry falls in one of
BUCKETS counters by the hash of its key, everything else of an inode (its attributes,
extended attributes, block references) in one counter by the hash of the inode: they change
together, and a stamp then names at most two counters per directory on the path and two for the
file, however many blocks it has; the mount adds one to a key's counter whenever the key changes,
and an answer carries the counters of its keys as they were when it was built (its stamp).
While every counter of a stamp still holds, the answer still holds: the reader checks a
handful of integers in memory instead of a round trip through the mount's one thread.

Readers get the table as a memfd with their first reply. It holds counters only, nothing of
any file, so every reader may have it; it is sealed against writes through any mapping but
the mount's own, so no reader can make another's stale answers look current. A second counter, `everything`, moves when
all answers must go (the engine's notices of other nodes' changes were lost for a while).
"""

import mmap
import os
import threading
from collections.abc import Iterable, Sequence

from aifs.bypass import _reader
from aifs.bypass.memfd import read_only_view, sealed_memfd
from aifs.meta import keys
from aifs.meta.cached_kv import cacheable

BUCKETS = 1 << 20  # 8 MiB of counters: two keys of one stamp share a counter about once in 10^5 stamps
HEADER = 2  # the sequence (moved by every change, under the lock) and `everything`
EVERYTHING = 1
Stamp = list[int]  # [everything, slot, value, slot, value, ...]


class _Counters:
    """Stamps checked against the counters: by the mount on its table, by readers on their view."""

    map: mmap.mmap  # the counters, for aifs.bypass._reader

    def shows(self, slots: tuple[int, ...], values: tuple[int, ...]) -> bool:
        """Whether the counters at `slots` still show `values` (a stamp, split): nothing the
        answer was built from has changed since."""
        return _reader.shows(self.map, slots, values)


class ChangeTable(_Counters):
    def __init__(self) -> None:
        self.fd, self.map = sealed_memfd("aifs-changes", (HEADER + BUCKETS) * 8, allocate=True)
        self._counters = memoryview(self.map).cast("Q")
        self._lock = threading.Lock()

    @staticmethod
    def slot(key: bytes) -> int:
        owner = key if key[:1] == keys.DENTRY else key[1:9]  # an inode's own keys: the inode number
        return HEADER + (hash(owner) & (BUCKETS - 1))

    def changed(self, keys: Iterable[bytes] | None) -> None:
        """A change of `keys` (None: of anything); any thread. Only the per-inode keys that
        answers are built from count: the uploader's queues and pack records, committed all
        the time while files are written, must not keep answers from being stamped."""
        if keys is not None:
            keys = [key for key in keys if cacheable(key)]
            if not keys:
                return
        counters = self._counters
        with self._lock:
            counters[0] += 1
            if keys is None:
                counters[EVERYTHING] += 1
            else:
                for key in keys:
                    counters[self.slot(key)] += 1

    def sequence(self) -> int:
        """Where the changes stand; pass it to `stamp` after reading the keys."""
        with self._lock:
            return self._counters[0]

    def stamp(self, since: int, keys: Iterable[bytes]) -> Stamp | None:
        """The stamp of an answer built from `keys` read after `sequence()` returned `since`;
        None when a change came meanwhile (the answer may predate it: it is used once)."""
        counters = self._counters
        slots = sorted({self.slot(key) for key in keys})
        with self._lock:
            if counters[0] != since:
                return None
            stamp = [counters[EVERYTHING]]
            for slot in slots:
                stamp += (slot, counters[slot])
            return stamp

    def close(self) -> None:
        self._counters.release()
        self.map.close()
        os.close(self.fd)


class ChangeView(_Counters):
    """A reader's read-only view of a mount's change table."""

    def __init__(self, fd: int) -> None:
        """Takes over `fd`."""
        self.map = read_only_view(fd)

    def close(self) -> None:
        self.map.close()


def split(stamp: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A stamp as the counters it names and the values they must still show."""
    return (EVERYTHING, *stamp[1::2]), (stamp[0], *stamp[2::2])
