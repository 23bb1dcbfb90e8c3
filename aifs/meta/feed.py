"""The keys each change of the metadata touched, as it happens, for whoever keeps answers
derived from them outside the engine (the data socket's readers remember where files are).

Every commit of this node reaches the listeners before `commit` returns, so nothing that
follows a change can miss it; on a shared engine, the changes of other nodes arrive as the
engine pushes them. A listener may also hear of keys about to change that no commit has
written yet (a file being written on this node: its newest bytes are in the mount's
buffers).
"""

import threading
from collections.abc import Iterable
from typing import Any

from aifs.meta.kv import Batch, KVStore, Listener


class ChangeFeed:
    """A KVStore around `inner` that tells listeners the keys of every commit."""

    def __init__(self, inner: KVStore) -> None:
        self._inner = inner
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        """Everything but commits is the inner store's."""
        return getattr(self._inner, name)

    def commit(self, batch: Batch) -> None:
        self._inner.commit(batch)
        if batch.ops:
            self.changed(list(batch.ops))

    def listen(self, listener: Listener) -> None:
        """`listener` hears the keys of every later change, None when anything may have
        changed (a shared engine's notices were lost for a while)."""
        with self._lock:
            first = not self._listeners
            self._listeners.append(listener)
        if first and self._inner.shared:
            self._inner.subscribe(self.changed, from_others=True)

    def forget(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def changed(self, keys: Iterable[bytes] | None) -> None:
        """Tell the listeners of a change: committed here, pushed by the engine, or about to be made."""
        keys = None if keys is None else list(keys)
        for listener in list(self._listeners):
            listener(keys)
