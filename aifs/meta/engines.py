"""Opening the metadata engine a config names: embedded RocksDB, or a shared Redis."""

from urllib.parse import urlsplit, urlunsplit

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


def redact(url: str | None) -> str:
    """An engine URL fit for messages and logs: any password replaced by ***."""
    if url is None:
        return "the state directory's RocksDB"
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
