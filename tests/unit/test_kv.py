"""ShardedRocksKV: the sharded RocksDB behind MetaEngine."""

import pytest

from aifs.meta import keys
from aifs.meta.kv import Batch
from aifs.meta.rocks_kv import ShardedRocksKV
from tests.meta.test_conformance_kv import sample

from .conftest import SHARDS


@pytest.fixture
def kv_path(tmp_path):
    return tmp_path / "kv"


@pytest.fixture
def kv(kv_path):
    kv_path.mkdir()
    store = ShardedRocksKV(kv_path, SHARDS)
    yield store
    store.close()


def put_all(kv, items: dict[bytes, bytes]) -> None:
    batch = Batch()
    for key, value in items.items():
        batch.put(key, value)
    kv.commit(batch)


def owners_in_distinct_shards(kv, count: int) -> list[int]:
    """`count` inode numbers whose keys land in pairwise different shards."""
    found: dict[int, int] = {}
    for ino in range(1, 1000):
        found.setdefault(kv._shard(keys.inode(ino)), ino)
        if len(found) == count:
            return sorted(found.values())
    raise AssertionError("the shard hash sends everything to fewer shards than asked")


@pytest.mark.parametrize("tag", [keys.DENTRY, keys.INODE, keys.BLOCK, keys.XATTR, keys.SYMLINK])
def test_bare_tag_scan_visits_every_shard(kv, tag):
    inos = owners_in_distinct_shards(kv, SHARDS)
    items = sample(inos)
    put_all(kv, items)
    expected = {k: v for k, v in items.items() if k[:1] == tag}
    got = list(kv.scan(tag))
    assert len(got) == len(expected), "a key was visited twice or missed"
    assert dict(got) == expected


def test_directory_and_inode_keys_share_a_shard(kv):
    for ino in range(1, 50):
        shard = kv._shard(keys.inode(ino))
        for key in (keys.dentry(ino, b"child"), keys.block(ino, 3), keys.xattr(ino, b"n"),
                    keys.symlink(ino)):
            assert kv._shard(key) == shard
    assert len({kv._shard(keys.inode(i)) for i in range(1, 50)}) == SHARDS


def test_commit_across_shards_is_all_or_nothing(kv):
    inos = owners_in_distinct_shards(kv, SHARDS)
    good = {keys.inode(i): b"new" for i in inos}
    batch = Batch()
    for key, value in good.items():
        batch.put(key, value)
    batch.put(keys.inode(inos[0] + 1000), "not bytes")  # the store refuses this one op
    with pytest.raises(ValueError):
        kv.commit(batch)
    assert kv.multi_get(list(good)) == [None] * len(good)


def test_reopen_keeps_data(kv_path):
    kv_path.mkdir()
    first = ShardedRocksKV(kv_path, SHARDS)
    items = sample([1, 2, 3, 4, 5])
    put_all(first, items)
    first.sync()
    first.close()
    second = ShardedRocksKV(kv_path, SHARDS)
    try:
        assert second.multi_get(list(items)) == list(items.values())
        assert dict(second.scan(keys.INODE)) == {k: v for k, v in items.items() if k[:1] == keys.INODE}
    finally:
        second.close()


@pytest.mark.parametrize("other", [SHARDS - 1, SHARDS + 4])
def test_shard_count_mismatch_on_reopen(kv_path, other):
    kv_path.mkdir()
    ShardedRocksKV(kv_path, SHARDS).close()
    with pytest.raises(ValueError, match=rf"{SHARDS} shards.*meta.shards = {other}"):
        ShardedRocksKV(kv_path, other)
    store = ShardedRocksKV(kv_path, SHARDS)  # the refusal left the store usable
    store.close()
