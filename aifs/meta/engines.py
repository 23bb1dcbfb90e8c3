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
    from aifs.meta.redis_kv import RedisKV  # the redis client loads only for volumes that use it

    return RedisKV.connect(config.meta.url, read_only=read_only)
