"""CachedKV in front of RedisKV on a real redis-server: pushes reach another node's cache,
nothing read before an invalidation is cached after it, a conflict drops the read set, and
only per-inode keys and dentries are cached, at most max_entries of them."""

from __future__ import annotations

import errno
import stat
import time
from typing import Any

import pytest

from aifs.config import Config
from aifs.errors import FsError
from aifs.meta import MetaEngine, keys
from aifs.meta.cached_kv import CachedKV
from aifs.meta.engine import ROOT_INO
from aifs.meta.engines import open_kv
from aifs.meta.kv import Batch
from aifs.meta.redis_kv import RedisKV
from aifs.meta.txn import Txn, retried

from .test_redis_kv import WAIT_S, Heard, put

KEY = keys.inode(7)


@pytest.fixture
def stores(server):
    """Open stores on the emptied server; all closed at teardown."""
    server.flush()
    opened: list[Any] = []

    def open_(make=lambda kv: kv) -> Any:
        opened.append(make(RedisKV.connect(server.url)))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


class Forwarding:
    """An inner store that is a real RedisKV but for what a subclass changes."""

    def __init__(self, inner: RedisKV) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class HeldPushes(Forwarding):
    """Pushes reach the cache only when the test hands them over: what a cache sees while
    a change's push is still on its way."""

    def subscribe(self, listener, from_others: bool = False) -> None:
        self.deliver = listener


class ChangedWhileReading(Forwarding):
    """Reads run `meanwhile` after the server answered and before the answer is returned: a
    change, and its push, arriving while a read is in flight."""

    meanwhile = None

    def _read(self, read, *args):
        answer = read(*args)
        if self.meanwhile is not None:
            action, self.meanwhile = self.meanwhile, None
            action()
        return answer

    def get(self, key):
        return self._read(self.inner.get, key)

    def get_fresh(self, key):
        return self._read(self.inner.get_fresh, key)

    def multi_get(self, keys_):
        return self._read(self.inner.multi_get, keys_)


def test_a_change_reaches_another_nodes_cache(stores):
    writer, node = stores(), stores(CachedKV)
    heard = Heard()
    node.subscribe(heard)
    put(writer, KEY, b"v1")
    heard.wait_for([KEY])
    heard.forget()
    assert node.get(KEY) == b"v1"
    assert node.get(keys.dentry(1, b"new")) is None
    seen_by_listener = []
    node.subscribe(lambda changed: seen_by_listener.append(node.get(KEY)) if changed == [KEY] else None)
    put(writer, KEY, b"v2")
    put(writer, keys.dentry(1, b"new"), keys.u64(8))
    heard.wait_for([KEY])
    heard.wait_for([keys.dentry(1, b"new")])
    assert seen_by_listener == [b"v2"], "listeners hear a push after the cache dropped its keys"
    assert node.multi_get([KEY, keys.dentry(1, b"new")]) == [b"v2", keys.u64(8)]


@pytest.mark.parametrize("read", ["get", "get_fresh", "multi_get"])
def test_a_value_read_before_an_invalidation_is_not_cached_after_it(stores, read):
    writer = stores()
    slow = stores(ChangedWhileReading)
    node = CachedKV(slow)
    heard = Heard()
    node.subscribe(heard)
    put(writer, KEY, b"v1")
    heard.wait_for([KEY])
    heard.forget()

    def change_and_push() -> None:
        put(writer, KEY, b"v2")
        heard.wait_for([KEY])

    slow.meanwhile = change_and_push
    ask = {"get": lambda: node.get(KEY), "get_fresh": lambda: node.get_fresh(KEY),
           "multi_get": lambda: node.multi_get([KEY])[0]}[read]
    assert ask() == b"v1", "the answer predates the change"
    assert node.get(KEY) == b"v2", "the answer read before the push was cached after it"


def test_a_conflict_drops_the_read_set_so_the_rerun_reads_afresh(stores):
    writer = stores()
    held = stores(HeldPushes)
    node = CachedKV(held)
    put(writer, KEY, b"v1")
    assert node.get(KEY) == b"v1"
    put(writer, KEY, b"v2")  # its push has not arrived
    assert node.get(KEY) == b"v1"
    attempts = []

    @retried
    def copy_key() -> None:
        attempts.append(1)
        txn = Txn(node)
        txn.batch.put(keys.inode(8), txn.get(KEY))
        txn.commit()

    copy_key()
    assert len(attempts) == 2
    assert writer.get(keys.inode(8)) == b"v2"


def test_a_nodes_own_commit_is_read_back_at_once(stores):
    node = CachedKV(stores(HeldPushes))
    put(node, KEY, b"v1")
    assert node.get(KEY) == b"v1"
    batch = Batch()
    batch.put(KEY, b"v2")
    in_hook = []
    batch.on_commit(lambda: in_hook.append(node.get(KEY)))
    node.commit(batch)
    assert in_hook == [b"v2"] and node.get(KEY) == b"v2"


def test_none_from_the_engine_drops_everything(stores):
    writer = stores()
    held = stores(HeldPushes)
    node = CachedKV(held)
    put(writer, KEY, b"v1")
    assert node.get(KEY) == b"v1"
    put(writer, KEY, b"v2")
    held.deliver(None)
    assert node.get(KEY) == b"v2"


@pytest.mark.parametrize("key, cached", [
    (keys.dentry(1, b"a"), True), (keys.inode(5), True), (keys.xattr(5, b"user.a"), True),
    (keys.symlink(5), True), (keys.block(5, 0), True),
    (keys.counter(b"volume"), False), (keys.orphan(5), False), (keys.upload(5), False),
    (keys.garbage(5), False), (keys.pin(5), False), (b"S" + keys.u64(1), False), (b"H" + keys.u64(5), False),
])
def test_only_per_inode_keys_and_dentries_are_cached(stores, key, cached):
    writer = stores()
    node = CachedKV(stores(HeldPushes))
    assert node.get(key) is None
    put(writer, key, b"new")
    assert node.get(key) == (None if cached else b"new")
    assert node.get_fresh(key) == b"new"


def test_counters_are_read_from_the_engine(stores):
    writer, node = stores(), CachedKV(stores(HeldPushes))
    counter = keys.counter(b"usage.inodes")
    assert node.counter(counter) == 0
    writer.add(counter, 3)
    assert node.counter(counter) == 3
    assert node.add(counter, 1) == 4


def test_the_cache_keeps_at_most_max_entries_least_recently_used_first_out(stores):
    writer = stores()
    node = CachedKV(stores(HeldPushes), max_entries=3)
    names = [keys.inode(ino) for ino in range(1, 5)]
    for key in names[:3]:
        assert node.get(key) is None
    assert node.get(names[0]) is None  # used again: now the most recent
    assert node.get(names[3]) is None  # evicts names[1]
    for key in names:
        put(writer, key, b"new")
    kept = [names[0], names[2], names[3]]
    assert [node.get(key) for key in kept] == [None, None, None], "served from the cache"
    assert node.get(names[1]) == b"new", "evicted, so read from the engine"


def test_open_kv_gives_nodes_a_cached_shared_store(server, tmp_path):
    """Two nodes of one volume through open_kv: a name one node looked up in vain (and cached
    as absent) is found once the other node created it."""
    server.flush()
    config = Config(volume={"state_dir": tmp_path / "state"}, meta={"url": server.url})
    first_kv, second_kv = open_kv(config), open_kv(config)
    try:
        assert isinstance(first_kv, CachedKV) and first_kv.shared
        first, second = MetaEngine(first_kv, 64 << 10), MetaEngine(second_kv, 64 << 10)
        assert first.volume == second.volume
        with pytest.raises(FsError) as missing:
            second.lookup(ROOT_INO, b"shared")
        assert missing.value.errno == errno.ENOENT
        ino, _ = first.create(ROOT_INO, b"shared", stat.S_IFREG | 0o644, 0, 0)
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                assert second.lookup(ROOT_INO, b"shared")[0] == ino
                break
            except FsError:
                assert time.monotonic() < deadline, "the other node never saw the new name"
                time.sleep(0.01)
    finally:
        first_kv.close()
        second_kv.close()

