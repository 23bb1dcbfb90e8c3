"""Opening the metadata engine a config names: embedded RocksDB, or a shared Redis."""

from aifs.config import Config
from aifs.meta.kv import KVStore
from aifs.meta.rocks_kv import ShardedRocksKV


def open_kv(config: Config, read_only: bool = False) -> KVStore:
    """The volume's store; `read_only` opens it for looking only (fsck without --repair)."""
    if config.meta.engine == "rocksdb":
        path = config.volume.state_dir / "meta"
        if not read_only:
            path.mkdir(parents=True, exist_ok=True)
        return ShardedRocksKV(path, config.meta.shards, read_only)
    from aifs.meta.cached_kv import CachedKV
    from aifs.meta.redis_kv import RedisKV  # the redis client loads only for volumes that use it

    return CachedKV(RedisKV.connect(config.meta.url, read_only=read_only))


def redact(url: str) -> str:
    """An engine URL fit for messages and logs, its password (if any) replaced by ***. Plain
    string work, so that even a URL too broken to parse is shown safely."""
    head, at, tail = url.rpartition("@")
    scheme, sep, userinfo = head.partition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}:***@{tail}" if at and colon else url
