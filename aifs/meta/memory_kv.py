"""An in-memory metadata engine: the namespace logic's unit tests run on it, and it is the
reference the shared conformance suite holds every other engine to. Nothing is durable."""

import bisect
from collections.abc import Iterator

from aifs.meta.kv import Batch, Conflict


class MemoryKV:
    """A sorted dict of keys; counters are plain ints beside it."""

    shared = False
    write_failure = None

    def __init__(self) -> None:
        self._values: dict[bytes, bytes] = {}
        self._order: list[bytes] = []
        self._counters: dict[bytes, int] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._values.get(key)

    get_fresh = get

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        return [self._values.get(key) for key in keys]

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        at = bisect.bisect_left(self._order, max(start, prefix) if start is not None else prefix)
        while at < len(self._order) and self._order[at].startswith(prefix):
            key = self._order[at]
            yield key, self._values[key]
            at = bisect.bisect_right(self._order, key)  # the list may change between steps

    def _any_under(self, prefix: bytes) -> bool:
        return next(self.scan(prefix), None) is not None

    def commit(self, batch: Batch) -> None:
        if batch.first_conflict(self.get, self._any_under) is not None:
            raise Conflict()
        for key, value in batch.ops.items():
            if value is None:
                self._remove(key)
            else:
                self._store(key, value)
        for key, delta in batch.increments.items():
            self._counters[key] = self._counters.get(key, 0) + delta
        batch.committed()

    def _store(self, key: bytes, value: bytes) -> None:
        if key not in self._values:
            bisect.insort(self._order, key)
        self._values[key] = value

    def _remove(self, key: bytes) -> None:
        if self._values.pop(key, None) is not None:
            del self._order[bisect.bisect_left(self._order, key)]

    def counter(self, key: bytes) -> int:
        return self._counters.get(key, 0)

    def add(self, key: bytes, delta: int) -> int:
        self._counters[key] = self._counters.get(key, 0) + delta
        return self._counters[key]

    def check_writable(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def sync(self) -> None:
        return None

    def close(self) -> None:
        return None
