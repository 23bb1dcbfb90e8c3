"""A node-local cache of point reads in front of a shared metadata engine.

Lookups and stats are point gets of dentries and inodes; on a shared engine each is a
network round trip, so this node keeps the answers (values and absences) of per-inode keys
and dentries, and drops them when the engine pushes the keys a commit changed. Counters and
volume-wide queues are always read from the engine.

A cached value can be stale only until the push of the change arrives; a transaction that
based a decision on it fails its commit with Conflict (its read set no longer holds), and the
keys it read are dropped here so its rerun reads them afresh.
"""

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator

from aifs.meta import keys
from aifs.meta.kv import Batch, Conflict, Listener, SharedKV

CACHED_TAGS = frozenset((keys.DENTRY, keys.INODE, keys.XATTR, keys.SYMLINK, keys.BLOCK))
MAX_ENTRIES = 100_000


def cacheable(key: bytes) -> bool:
    return key[:1] in CACHED_TAGS


class CachedKV:
    """KVStore around a shared `inner` store, caching at most `max_entries` point reads,
    least recently used first out.

    An invalidation epoch counts every drop: a read records it before asking the engine and
    keeps the answer only if no drop came meanwhile, so nothing read before an invalidation
    is cached after it."""

    def __init__(self, inner: SharedKV, max_entries: int = MAX_ENTRIES) -> None:
        self._inner = inner
        self.shared = inner.shared
        self._max_entries = max_entries
        self._entries: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._epoch = 0
        self._lock = threading.Lock()
        inner.subscribe(self._pushed, from_others=True)  # its own commits it caches as they return

    # -- reads -------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        if not cacheable(key):
            return self._inner.get(key)
        held, epoch = self._held((key,))
        if held:
            return held[key]
        value = self._inner.get(key)
        self._keep({key: value}, epoch)
        return value

    def get_fresh(self, key: bytes) -> bytes | None:
        epoch = self._held(())[1]
        value = self._inner.get_fresh(key)
        if cacheable(key):
            self._keep({key: value}, epoch)
        return value

    def multi_get(self, keys_: list[bytes]) -> list[bytes | None]:
        found, epoch = self._held(keys_)
        missing = [key for key in dict.fromkeys(keys_) if key not in found]
        if missing:
            fetched = dict(zip(missing, self._inner.multi_get(missing)))
            self._keep({key: value for key, value in fetched.items() if cacheable(key)}, epoch)
            found.update(fetched)
        return [found[key] for key in keys_]

    def _held(self, keys_: Iterable[bytes]) -> tuple[dict[bytes, bytes | None], int]:
        """What the cache holds of `keys_` (each now the most recently used), and the epoch."""
        with self._lock:
            held = {}
            for key in keys_:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    held[key] = self._entries[key]
            return held, self._epoch

    def _keep(self, answers: dict[bytes, bytes | None], epoch: int) -> None:
        """Cache what the engine answered, unless something was dropped since `epoch`: the
        answer may predate that change, so the keys are left uncached."""
        with self._lock:
            if epoch != self._epoch:
                for key in answers:
                    self._entries.pop(key, None)
                return
            for key, value in answers.items():
                self._entries[key] = value
                self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def _drop(self, changed: Iterable[bytes] | None) -> None:
        """Forget `changed` (None: everything) and move the epoch on."""
        with self._lock:
            self._epoch += 1
            if changed is None:
                self._entries.clear()
            else:
                for key in changed:
                    self._entries.pop(key, None)

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self._inner.scan(prefix, start)

    def counter(self, key: bytes) -> int:
        return self._inner.counter(key)

    # -- writes ------------------------------------------------------------

    def commit(self, batch: Batch) -> None:
        """Commit through the engine, then cache what the batch wrote: the next getattr of a
        file this node just changed costs no round trip. The written keys are dropped before,
        so the batch's own hooks read what it stored. On Conflict the read set goes, for the
        rerun to read afresh; on any other failure the written keys stay dropped."""
        self._drop(batch.ops)
        epoch = self._held(())[1]
        try:
            self._inner.commit(batch)
        except Conflict:
            self._drop(batch.reads)
            raise
        self._keep_written({key: value for key, value in batch.ops.items() if cacheable(key)}, epoch)

    def _keep_written(self, written: dict[bytes, bytes | None], epoch: int) -> None:
        """Cache a commit's writes unless a change was pushed since `epoch` (another node may
        have changed them after this commit). The epoch moves on, so no read that started
        before the commit can cache its older answer over these."""
        with self._lock:
            if epoch != self._epoch:
                for key in written:
                    self._entries.pop(key, None)
                return
            self._epoch += 1
            for key, value in written.items():
                self._entries[key] = value
                self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def add(self, key: bytes, delta: int) -> int:
        return self._inner.add(key, delta)

    def check_writable(self) -> None:
        self._inner.check_writable()

    def writable(self) -> bool:
        return self._inner.writable()

    @property
    def write_failure(self) -> str | None:
        return self._inner.write_failure

    def sync(self) -> None:
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()

    # -- pushes ------------------------------------------------------------

    def subscribe(self, listener: Listener, from_others: bool = False) -> None:
        """Have `listener` hear the engine's pushes (with `from_others`, other nodes' only), after
        this cache dropped their keys: the cache subscribed first, so it hears each one first."""
        self._inner.subscribe(listener, from_others)

    def _pushed(self, changed: list[bytes] | None) -> None:
        self._drop(changed)
