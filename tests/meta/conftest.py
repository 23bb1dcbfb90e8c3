"""Fixtures of the metadata conformance suite (test_conformance_*.py), whose every test runs
on each metadata engine.

* ``store``     one empty store of the test's engine: ``memory``, ``rocksdb``, ``redis`` or
                ``redis-cached`` (a redis client behind a node-local cache). ``store.client()``
                opens a client of it, ``store.reopen()`` closes every client and opens anew.
* ``kv``        the first client of ``store``.
* ``second_kv`` a factory for another client of the same store, as a second node has one:
                the same instance for the embedded engines (memory, rocksdb), a connection
                of its own for redis (with a cache of its own for redis-cached).
* ``meta``      a MetaEngine on ``kv``, formatting a new volume; the namespace it leaves
                must pass `audit`.

Redis tests share one session-wide redis-server, emptied before each test; their clients
close in the background (a client's push thread takes a moment to stop). Tests that need
real threads, not interleavings staged in one thread, run on the network engines only
(``@NETWORK``): the embedded engines serve one thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from aifs.meta import MetaEngine, keys
from aifs.meta.attrs import BlockRef, Inode
from aifs.meta.engine import ROOT_INO
from aifs.meta.kv import Batch, KVStore
from aifs.meta.memory_kv import MemoryKV
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.meta.usage import BYTES, INODES
from redisserver import RedisServer, running
from tests.unit.conftest import BS, SHARDS

ENGINES = ["memory", "rocksdb", "redis", "redis-cached"]
NETWORK = pytest.mark.parametrize("store", ["redis", "redis-cached"], indirect=True)
THREAD_TIMEOUT_S = 60.0
CONVERGE_S = 10.0


class Store:
    """One store of one engine for one test, and every client opened on it."""

    def __init__(self, engine: str, directory: Path, redis: RedisServer | None = None,
                 close_later: Callable[[KVStore], None] | None = None, db: int = 0) -> None:
        self.engine = engine
        self.db = db
        self.directory = directory
        self.redis = redis
        self._close_later = close_later
        self._clients: list[KVStore] = []
        self._embedded: KVStore | None = None

    def client(self, read_only: bool = False) -> KVStore:
        """A client of the store: the store itself for an embedded engine (one per process),
        a connection of its own for redis. `read_only` opens one that only reads (fsck's),
        which the memory engine has not."""
        if self.engine == "memory":
            assert not read_only, "the memory engine has no read-only client"
            self._embedded = self._embedded or MemoryKV()
            return self._remember(self._embedded)
        if self.engine == "rocksdb":
            return self._remember(self._rocksdb(read_only))
        from aifs.meta.redis_kv import RedisKV

        client = RedisKV.connect(self.redis.url_of(self.db), read_only=read_only)
        if self.engine == "redis-cached":
            from aifs.meta.cached_kv import CachedKV

            client = CachedKV(client)
        return self._remember(client)

    def _rocksdb(self, read_only: bool) -> KVStore:
        if read_only:
            return ShardedRocksKV(self.directory, SHARDS, read_only=True)
        if self._embedded is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._embedded = ShardedRocksKV(self.directory, SHARDS)
        return self._embedded

    def _remember(self, client: KVStore) -> KVStore:
        if all(client is not known for known in self._clients):
            self._clients.append(client)
        return client

    def reopen(self) -> KVStore:
        """Close every client and open the store again: what a remount sees. The memory
        engine keeps its contents in the instance, so it is only handed out again."""
        if self.engine != "memory":
            self.close()
            self._embedded = None
        return self.client()

    def close(self) -> None:
        while self._clients:
            client = self._clients.pop()
            if self._close_later is None:
                client.close()
            else:
                self._close_later(client)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[RedisServer]:
    """The conformance suite's server: each test on a database of its own (BackgroundCloser)."""
    with running(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RedisServer]:
    """A server of the module's own, for the driver's suites, which empty it between tests."""
    with running(tmp_path_factory.mktemp("redis")) as shared:
        yield shared


class BackgroundCloser:
    """Closes redis clients while the next tests run, each test on the next of the server's
    databases in turn: a database is emptied for a new test only once its clients are closed
    (a client closing after its data went would rightly report its writes lost)."""

    DATABASES = 16

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._closing: dict[int, list] = {db: [] for db in range(self.DATABASES)}
        self._next = 0

    def database(self) -> int:
        """The next database, its clients closed (failures raised)."""
        db, self._next = self._next, (self._next + 1) % self.DATABASES
        while self._closing[db]:
            self._closing[db].pop().result()
        return db

    def close_later(self, db: int) -> Callable[[KVStore], None]:
        return lambda client: self._closing[db].append(self._pool.submit(client.close))

    def drain(self) -> None:
        for db in self._closing:
            while self._closing[db]:
                self._closing[db].pop().result()


@pytest.fixture(scope="session")
def redis_closer(redis_server) -> Iterator[BackgroundCloser]:
    """All clients are closed, and any failure to close raised, before the server stops."""
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="close-redis-client") as pool:
        closer = BackgroundCloser(pool)
        yield closer
        closer.drain()


@pytest.fixture(params=ENGINES)
def store(request, tmp_path) -> Store:
    if request.param.startswith("redis"):
        redis, closer = request.getfixturevalue("redis_server"), request.getfixturevalue("redis_closer")
        db = closer.database()
        redis.flush(db)
        opened = Store(request.param, tmp_path / "meta", redis, closer.close_later(db), db)
    else:
        opened = Store(request.param, tmp_path / "meta")
    yield opened
    opened.close()


@pytest.fixture
def kv(store) -> KVStore:
    return store.client()


@pytest.fixture
def second_kv(store, kv) -> Callable[[], KVStore]:
    """Opens another client, after `kv` (the store's first)."""
    return store.client


@pytest.fixture
def meta(store, kv) -> MetaEngine:
    yield MetaEngine(kv, BS)
    audit(store.client())


def write_all(kv: KVStore, changes: dict[bytes, bytes | None]) -> None:
    """Commit `changes` in one batch: a value puts its key, None deletes it."""
    batch = Batch()
    for key, value in changes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    kv.commit(batch)


class Interleaved:
    """A client whose next commits first run the changes queued with `before_commit`: what
    another node does between an operation's reads and its commit."""

    def __init__(self, inner: KVStore) -> None:
        self._inner = inner
        self._pending: list[Callable[[], Any]] = []

    def before_commit(self, change: Callable[[], Any]) -> None:
        self._pending.append(change)

    def drop_pending(self) -> None:
        """Forget changes queued for an operation that failed before it committed."""
        self._pending.clear()

    def commit(self, batch: Batch) -> None:
        if self._pending:
            self._pending.pop(0)()
        self._inner.commit(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def audit(kv: KVStore) -> None:
    """The namespace in `kv` is whole: every entry joins two live inodes, link counts and
    directory parents agree with the entries, every directory reaches the root, no key
    outlives its inode, and the usage totals equal a recount."""
    inodes = {keys.read_u64(k, 1): Inode.decode(v) for k, v in kv.scan(keys.INODE)}
    entries = [(keys.read_u64(k, 1), k[9:], keys.read_u64(v)) for k, v in kv.scan(keys.DENTRY)]
    _audit_entries(inodes, entries)
    _audit_link_counts(kv, inodes, entries)
    held = _audit_owned_keys(kv, inodes)
    assert (kv.counter(INODES), kv.counter(BYTES)) == (len(inodes), sum(held.values())), "usage totals drifted"


def _audit_entries(inodes: dict[int, Inode], entries: list[tuple[int, bytes, int]]) -> None:
    for parent, name, child in entries:
        assert parent in inodes and inodes[parent].is_dir, f"entry {name!r} in a removed directory {parent}"
        assert child in inodes, f"entry {name!r} in {parent} names a removed inode {child}"
        if inodes[child].is_dir:
            assert inodes[child].parent == parent, f"directory {child} is in {parent}, says its parent is not"
    for ino, node in inodes.items():
        path = [ino]
        while node.is_dir and path[-1] != ROOT_INO:
            assert len(path) <= len(inodes), f"directories form a loop: {path}"
            path.append(inodes[path[-1]].parent)


def _audit_link_counts(kv: KVStore, inodes: dict[int, Inode], entries: list[tuple[int, bytes, int]]) -> None:
    links = Counter(child for _, _, child in entries)
    subdirs = Counter(parent for parent, _, child in entries if inodes[child].is_dir)
    orphans = {keys.read_u64(k, 1) for k, _ in kv.scan(keys.ORPHAN)}
    for ino, node in inodes.items():
        if node.is_dir:
            assert node.nlink == 2 + subdirs[ino], f"directory {ino}: nlink {node.nlink}, {subdirs[ino]} subdirs"
            assert links[ino] == (0 if ino == ROOT_INO else 1), f"directory {ino} has {links[ino]} entries"
        else:
            assert node.nlink == links[ino], f"inode {ino}: nlink {node.nlink}, {links[ino]} entries"
        assert (node.nlink == 0) == (ino in orphans), f"inode {ino}: nlink {node.nlink}, orphan record disagrees"
    assert orphans <= set(inodes), "an orphan record outlived its inode"


def _audit_owned_keys(kv: KVStore, inodes: dict[int, Inode]) -> Counter:
    """Every block ref, xattr, symlink target and pin names a live inode; returns the bytes
    each inode's blocks hold, which must be its `alloc`."""
    held = Counter()
    for tag in (keys.BLOCK, keys.XATTR, keys.SYMLINK, keys.PIN):
        for key, value in kv.scan(tag):
            assert keys.read_u64(key, 1) in inodes, f"{key!r} outlived its inode"
            if tag == keys.BLOCK:
                held[keys.owner(key)] += BlockRef.decode(value).length
    assert {ino: n.alloc for ino, n in inodes.items() if n.alloc} == {ino: n for ino, n in held.items() if n}
    return held


def eventually(read: Callable[[], Any], expected: Any) -> Any:
    """What `read()` returns once it equals `expected`, or after CONVERGE_S: a client with a
    node-local cache learns of another client's change shortly after it commits."""
    deadline = time.monotonic() + CONVERGE_S
    while (got := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return got


def run_together(*work: Callable[[], Any]) -> list[Any]:
    """Run each callable in a thread of its own, started at once; their results in order.
    An exception in a thread is raised here; a thread still running after
    THREAD_TIMEOUT_S fails the test."""
    start = threading.Barrier(len(work))
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = []

    def runner(index: int, job: Callable[[], Any]) -> None:
        try:
            start.wait(THREAD_TIMEOUT_S)
            results[index] = job()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            errors.append(e)

    threads = [threading.Thread(target=runner, args=(i, job), daemon=True) for i, job in enumerate(work)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(THREAD_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), f"threads still running after {THREAD_TIMEOUT_S}s"
    if errors:
        raise errors[0]
    return results
