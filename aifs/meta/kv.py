"""The transactional KV seam under MetaEngine, and its embedded sharded-RocksDB backend.

Shards are column families of one RocksDB: they share one WAL, so a WriteBatch that
spans shards is still atomic, while memtables and compaction run per shard.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from aifs.meta.keys import is_owned_tag, owner

_GOLDEN = 0x9E3779B97F4A7C15
_CACHE_BYTES = 256 << 20


class Batch:
    """Puts and deletes that commit together or not at all."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: dict[bytes, bytes | None] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self.ops[key] = value

    def delete(self, key: bytes) -> None:
        self.ops[key] = None


class KVStore(Protocol):
    """What MetaEngine needs from a store; a network backend implements the same."""

    def get(self, key: bytes) -> bytes | None: ...

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]: ...

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]: ...

    def commit(self, batch: Batch) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


def _options(cache: Cache) -> Options:
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    opts = Options(raw_mode=True)
    opts.set_block_based_table_factory(table)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_max_background_jobs(2)
    return opts


class ShardedRocksKV:
    """KVStore over RocksDB column families `s0..sN-1`; `meta` holds volume-wide keys."""

    def __init__(self, path: Path, shards: int) -> None:
        cache = Cache(_CACHE_BYTES)
        opts = _options(cache)
        names = [f"s{i}" for i in range(shards)]
        existing = Rdict.list_cf(str(path), opts) if (path / "CURRENT").exists() else []
        stored = [n for n in existing if n.startswith("s")]
        if stored and len(stored) != shards:
            raise ValueError(
                f"metadata at {path} has {len(stored)} shards, config says meta.shards = {shards}; "
                "the shard count is fixed when a volume is formatted"
            )
        families = {name: _options(cache) for name in [*names, "meta"]}
        self._db = Rdict(str(path), opts, column_families=families)
        self._handles = [self._db.get_column_family_handle(n) for n in names]
        self._families = [self._db.get_column_family(n) for n in names]
        self._meta_handle = self._db.get_column_family_handle("meta")
        self._meta = self._db.get_column_family("meta")
        self._write_opts = WriteOptions()
        self._write_opts.sync = False

    def _shard(self, key: bytes) -> int | None:
        ino = owner(key)
        if ino is None:
            return None
        return ((ino * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) % len(self._families)

    def _family(self, key: bytes) -> Rdict:
        shard = self._shard(key)
        return self._meta if shard is None else self._families[shard]

    def _handle(self, key: bytes):
        shard = self._shard(key)
        return self._meta_handle if shard is None else self._handles[shard]

    def get(self, key: bytes) -> bytes | None:
        return self._family(key).get(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        return [self._family(key).get(key) for key in keys]

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with `prefix` in order, from `start` (inclusive) when given.

        A bare tag of per-inode keys (fsck's full sweeps) visits shard after shard.
        """
        if is_owned_tag(prefix):
            for family in self._families:
                yield from self._scan_family(family, prefix, start)
        else:
            yield from self._scan_family(self._family(prefix), prefix, start)

    @staticmethod
    def _scan_family(family: Rdict, prefix: bytes, start: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it = family.iter()
        it.seek(max(start, prefix) if start is not None else prefix)
        try:
            while it.valid():
                key = it.key()
                if not key.startswith(prefix):
                    return
                yield key, it.value()
                it.next()
        finally:
            del it

    def commit(self, batch: Batch) -> None:
        if not batch.ops:
            return
        wb = WriteBatch(raw_mode=True)
        for key, value in batch.ops.items():
            if value is None:
                wb.delete(key, self._handle(key))
            else:
                wb.put(key, value, self._handle(key))
        self._db.write(wb, self._write_opts)

    def sync(self) -> None:
        """Make every committed batch durable (fsync of the shared WAL)."""
        self._db.flush_wal(True)

    def close(self) -> None:
        self._db.flush_wal(True)
        del self._families, self._handles, self._meta, self._meta_handle
        self._db.close()
