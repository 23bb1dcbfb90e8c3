"""The transactional KV seam under MetaEngine: what every metadata engine driver provides.

A namespace operation reads what it needs, then commits one Batch: its writes, the values
it read (its read set), the key ranges it found empty, and counter increments. The engine
applies the batch atomically only if the read set still holds, and raises Conflict
otherwise; the operation then runs again on fresh reads (aifs.meta.txn.retried). This is
optimistic concurrency: an embedded single-writer engine never sees a conflict, a shared
engine (many nodes) sees one only when two nodes change the same thing at once.

Counters (ids, usage totals) are separate from plain values: each engine stores them in
its own native form and changes them with atomic increments, never by rewriting a total.
"""

from collections.abc import Callable, Iterator
from typing import Protocol

from aifs.meta.writestate import MetaWriteFailed


class Conflict(Exception):
    """A batch's read set changed before it could commit; rerun the operation."""


class Batch:
    """Puts and deletes that commit together or not at all, under what they were based on."""

    __slots__ = ("_on_commit", "empty", "increments", "ops", "reads")

    def __init__(self) -> None:
        self.ops: dict[bytes, bytes | None] = {}
        self.reads: dict[bytes, bytes | None] = {}
        self.empty: list[bytes] = []
        self.increments: dict[bytes, int] = {}
        self._on_commit: list[Callable[[], None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops[key] = value

    def delete(self, key: bytes) -> None:
        self.ops[key] = None

    def expect(self, key: bytes, value: bytes | None) -> None:
        """Commit only if `key` still holds `value` (None: still absent). The first read counts."""
        self.reads.setdefault(key, value)

    def expect_empty(self, prefix: bytes) -> None:
        """Commit only if no key starts with `prefix` (an empty directory stays empty)."""
        self.empty.append(prefix)

    def add(self, counter: bytes, delta: int) -> None:
        """Move a counter by `delta` when the batch commits, whatever others added meanwhile."""
        self.increments[counter] = self.increments.get(counter, 0) + delta

    def on_commit(self, apply: Callable[[], None]) -> None:
        """Run `apply` once the batch is stored: what memory mirrors of the store changes
        with it, and stays as it was when the store refuses the batch."""
        self._on_commit.append(apply)

    def committed(self) -> None:
        for apply in self._on_commit:
            apply()

    def first_conflict(self, get: Callable[[bytes], bytes | None],
                       any_under: Callable[[bytes], bool]) -> bytes | None:
        """The first read or empty range that no longer holds, for engines that check a
        batch against their own current state; None when the batch may commit."""
        for key, value in self.reads.items():
            if get(key) != value:
                return key
        for prefix in self.empty:
            if any_under(prefix):
                return prefix
        return None


class WritableByCheck:
    """`writable()` for an engine whose `check_writable()` raises MetaWriteFailed."""

    def check_writable(self) -> None:
        raise NotImplementedError

    def writable(self) -> bool:
        try:
            self.check_writable()
        except MetaWriteFailed:
            return False
        return True


class KVStore(Protocol):
    """What MetaEngine needs from a metadata engine; each driver is one module.

    `commit` stores a batch atomically and then runs its on-commit hooks, or raises Conflict;
    a store that cannot write raises MetaWriteFailed (ENOSPC or EIO) and stays readable.
    `shared` says whether other nodes may change the store (a network engine)."""

    shared: bool

    def get(self, key: bytes) -> bytes | None: ...

    def get_fresh(self, key: bytes) -> bytes | None:
        """Like get, bypassing any node-local cache: what the engine holds right now."""

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]: ...

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with `prefix` (at least a tag byte) in byte order, from `start`
        (inclusive) when given. Keys present for the whole scan come exactly once; keys added
        or removed while it runs come at most once (an engine may scan a snapshot)."""

    def commit(self, batch: Batch) -> None: ...

    def counter(self, key: bytes) -> int:
        """A counter's value (0 when it was never moved)."""

    def add(self, key: bytes, delta: int) -> int:
        """Move a counter at once, atomically across nodes; returns its new value."""

    def check_writable(self) -> None: ...

    def writable(self) -> bool: ...

    @property
    def write_failure(self) -> str | None: ...

    def sync(self) -> None:
        """Make every committed batch durable by the engine's rules."""

    def close(self) -> None: ...


Listener = Callable[[list[bytes] | None], None]


class SharedKV(KVStore, Protocol):
    """A store other nodes change too (`shared`), which tells its listeners the keys each
    commit changed (None: anything may have changed, the notices were lost for a while).
    Keys start with a tag byte; a shared engine may keep keys of its own outside the tags."""

    def subscribe(self, listener: Listener, from_others: bool = False) -> None:
        """`listener` hears every commit's changed keys, or with `from_others` only those of
        other nodes, on a thread of the engine's."""
