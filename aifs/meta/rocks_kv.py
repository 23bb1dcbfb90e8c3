"""The embedded metadata engine: sharded RocksDB in the volume's state directory (one node).

Shards are column families of one RocksDB: they share one WAL, so a WriteBatch that
spans shards is still atomic, while memtables and compaction run per shard.

A write that fails (a full disk, an I/O error) breaks RocksDB's WAL writer until the
database is reopened, so the store turns read-only for changes, keeps serving reads, and
reopens itself once writes can succeed again (aifs.meta.writestate).
"""

import errno
import heapq
import struct
import threading
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from aifs.meta.keys import is_owned_tag, owner
from aifs.meta.kv import Batch, Conflict, WritableByCheck
from aifs.meta.snapshot_view import ReadOnlyView
from aifs.meta.writestate import MetaWriteFailed, WriteState, classify, sync_wal_files

_GOLDEN = 0x9E3779B97F4A7C15
_CACHE_BYTES = 256 << 20
_COUNTER = struct.Struct(">q")


def _options(cache: Cache) -> Options:
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    opts = Options(raw_mode=True)
    opts.set_block_based_table_factory(table)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(16)  # each reopen of a store that failed rotates RocksDB's info log
    return opts


def _after_prefix(prefix: bytes) -> bytes | None:
    """The first key past every key that starts with `prefix`; None when there is none."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class ShardedRocksKV(WritableByCheck):
    """KVStore over RocksDB column families `s0..sN-1`; `meta` holds volume-wide keys.

    One process owns the store, so a batch checked against the current state cannot be
    overtaken before it is written: conflicts only arise from stale reads of the caller.
    Counters are signed 64-bit big-endian values.

    `read_only` (fsck without --repair) opens a ReadOnlyView of the directory, so nothing in
    it changes; writes then fail. A store whose disk is full when it opens serves reads from
    such a view until it can be reopened for writes.

    Commits and reads come from one thread (the mount's event loop), and so do reopens;
    `sync` may run on another thread, so it and a reopen hold `_lock`.
    """

    shared = False

    def __init__(self, path: Path, shards: int, read_only: bool = False) -> None:
        self._path = path
        self._cache = Cache(_CACHE_BYTES)
        self._names = [f"s{i}" for i in range(shards)]
        existing = Rdict.list_cf(str(path), _options(self._cache)) if (path / "CURRENT").exists() else []
        stored = [n for n in existing if n.startswith("s")]
        if stored and len(stored) != shards:
            raise ValueError(
                f"metadata at {path} has {len(stored)} shards, config says meta.shards = {shards}; "
                "the shard count is fixed when a volume is formatted"
            )
        self._read_only = read_only
        self._state = WriteState(path)
        self._lock = threading.RLock()
        self._write_opts = WriteOptions()
        self._write_opts.sync = False
        self._view: ReadOnlyView | None = None
        if read_only:
            self._open(read_only=True)
        else:
            self._open_for_writes()

    def _open(self, read_only: bool) -> None:
        """Open the database (with `read_only`, a ReadOnlyView of it) and its families."""
        opts = _options(self._cache)
        families = {name: _options(self._cache) for name in [*self._names, "meta"]}
        if read_only:
            self._view = ReadOnlyView(self._path)
            try:
                self._db = Rdict(str(self._view.path), opts, column_families=families,
                                 access_type=AccessType.read_only())
            except Exception:
                self._view.close()
                self._view = None
                raise
        else:
            self._db = Rdict(str(self._path), opts, column_families=families)
        self._handles = [self._db.get_column_family_handle(n) for n in self._names]
        self._families = [self._db.get_column_family(n) for n in self._names]
        self._meta_handle = self._db.get_column_family_handle("meta")
        self._meta = self._db.get_column_family("meta")

    def _open_for_writes(self) -> None:
        """Open for writes; an existing store on a full disk (its WAL cannot be replayed
        into tables) opens read-only instead, and reopens once there is room."""
        try:
            self._open(read_only=False)
        except Exception as e:
            if not (self._path / "CURRENT").exists() or classify(e, self._path).errno != errno.ENOSPC:
                raise
            self._state.failed(e, wal_intact=True)
            self._open(read_only=True)

    def _close_db(self) -> None:
        del self._families, self._handles, self._meta, self._meta_handle
        try:
            self._db.close()
        except Exception:  # a DB whose writer failed says so again as it closes; it is closed all the same
            if self._state.failure is None:
                raise
        del self._db
        if self._view is not None:
            self._view.close()
            self._view = None

    def _shard(self, key: bytes) -> int | None:
        ino = owner(key)
        if ino is None:
            return None
        return ((ino * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) % len(self._names)

    def _family(self, key: bytes) -> Rdict:
        shard = self._shard(key)
        return self._meta if shard is None else self._families[shard]

    def _handle(self, key: bytes):
        shard = self._shard(key)
        return self._meta_handle if shard is None else self._handles[shard]

    def get(self, key: bytes) -> bytes | None:
        return self._family(key).get(key)

    get_fresh = get

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        """One batched read per column family the keys live in (a listing's attributes)."""
        by_family: dict[int | None, list[int]] = {}
        for position, key in enumerate(keys):
            by_family.setdefault(self._shard(key), []).append(position)
        found: list[bytes | None] = [None] * len(keys)
        for shard, positions in by_family.items():
            family = self._meta if shard is None else self._families[shard]
            for position, value in zip(positions, family.get([keys[p] for p in positions])):
                found[position] = value
        return found

    def counter(self, key: bytes) -> int:
        stored = self.get(key)
        return 0 if stored is None else _COUNTER.unpack(stored)[0]

    def add(self, key: bytes, delta: int) -> int:
        batch = Batch()
        batch.add(key, delta)
        self.commit(batch)
        return self.counter(key)

    def _any_under(self, prefix: bytes) -> bool:
        return next(self.scan(prefix), None) is not None

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with `prefix` in order, from `start` (inclusive) when given.

        A bare tag of per-inode keys (fsck's full sweeps, a dump) merges the shards' scans,
        so its order is the same as on an engine without shards.
        """
        if is_owned_tag(prefix):
            yield from heapq.merge(*(self._scan_family(family, prefix, start) for family in self._families),
                                   key=itemgetter(0))
        else:
            yield from self._scan_family(self._family(prefix), prefix, start)

    @staticmethod
    def _scan_family(family: Rdict, prefix: bytes, start: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """RocksDB stops the scan at the prefix's end itself (an upper bound), so a long
        listing costs one call per entry, not a key check and three iterator calls."""
        bounds = ReadOptions()
        end = _after_prefix(prefix)
        if end is not None:
            bounds.set_iterate_upper_bound(end)
        yield from family.items(from_key=max(start, prefix) if start is not None else prefix, read_opt=bounds)

    # -- writes ------------------------------------------------------------

    @property
    def write_failure(self) -> str | None:
        """None while writes succeed; otherwise why the metadata is read-only, in one line."""
        failure = self._state.failure
        return None if failure is None else failure.reason

    def check_writable(self) -> None:
        """Raise MetaWriteFailed unless writes can go through now. After a failure this is
        where the database is reopened, once the disk has room again."""
        if self._read_only:
            raise MetaWriteFailed(errno.EROFS, f"the metadata in {self._path} is open read-only")
        if self._state.failure is not None and not (self._state.may_retry() and self._reopen()):
            raise self._state.failure


    def _reopen(self) -> bool:
        """Close the failed database and open it again; when that fails too, reads go on
        from a read-only view of it."""
        with self._lock:
            self._close_db()
            try:
                self._open(read_only=False)
            except Exception as e:  # noqa: BLE001 - rocksdict raises RocksDB's errors as plain Exception
                self._state.reopen_failed(e)
                self._open(read_only=True)
                return False
            self._state.recovered()
        return True

    def commit(self, batch: Batch) -> None:
        if batch.first_conflict(self.get, self._any_under) is not None:
            raise Conflict()
        if batch.ops or batch.increments:
            self.check_writable()
            wb = WriteBatch(raw_mode=True)
            for key, value in batch.ops.items():
                if value is None:
                    wb.delete(key, self._handle(key))
                else:
                    wb.put(key, value, self._handle(key))
            for key, delta in batch.increments.items():
                wb.put(key, _COUNTER.pack(self.counter(key) + delta), self._handle(key))
            try:
                self._db.write(wb, self._write_opts)
            except Exception as e:  # noqa: BLE001 - rocksdict raises RocksDB's errors as plain Exception
                raise self._state.failed(e, wal_intact=True) from None
        batch.committed()

    def sync(self) -> None:
        """Make every committed batch durable (fsync of the shared WAL). A store that turned
        read-only for lack of space fsyncs the WAL files itself: all it acknowledged is in them."""
        with self._lock:
            if self._state.failure is None:
                try:
                    self._db.flush_wal(True)
                    return
                except Exception as e:  # noqa: BLE001 - rocksdict raises RocksDB's errors as plain Exception
                    self._state.failed(e, wal_intact=False)
            if not self._state.wal_intact:
                raise self._state.failure
            try:
                sync_wal_files(self._path)
            except OSError as e:
                raise MetaWriteFailed(errno.EIO, f"{self._state.failure.reason}; and its WAL could not "
                                                 f"be synced: {e}") from None

    def close(self) -> None:
        """Make what was committed durable, then close; a store that cannot write is
        reopened first when its disk has room again."""
        try:
            if not self._read_only:
                self.writable()
                self.sync()
        finally:
            with self._lock:
                self._close_db()
