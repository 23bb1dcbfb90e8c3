"""ShardedRocksKV: the sharded RocksDB behind MetaEngine."""

import pytest

from aifs.meta import keys
from aifs.meta.kv import Batch
from aifs.meta.rocks_kv import ShardedRocksKV

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


def sample(inos) -> dict[bytes, bytes]:
    """Keys of every per-inode tag, plus volume-wide ones, for each inode."""
    items = {}
    for ino in inos:
        v = str(ino).encode()
        items[keys.inode(ino)] = b"inode" + v
        items[keys.dentry(ino, b"a")] = b"da" + v
        items[keys.dentry(ino, b"b")] = b"db" + v
        items[keys.block(ino, 0)] = b"b0" + v
        items[keys.block(ino, 7)] = b"b7" + v
        items[keys.xattr(ino, b"user.x")] = b"x" + v
        items[keys.symlink(ino)] = b"l" + v
        items[keys.orphan(ino)] = b""
        items[keys.upload(ino * 10)] = b""
    items[keys.counter(b"next_ino")] = keys.u64(99)
    return items


def test_get_and_multi_get(kv):
    items = sample(owners_in_distinct_shards(kv, 3))
    put_all(kv, items)
    for key, value in items.items():
        assert kv.get(key) == value
    wanted = [*items, keys.inode(123456), keys.counter(b"nothing")]
    assert kv.multi_get(wanted) == [*items.values(), None, None]


def test_delete_in_batch(kv):
    put_all(kv, {keys.inode(5): b"x", keys.counter(b"c"): b"y"})
    batch = Batch()
    batch.delete(keys.inode(5))
    batch.delete(keys.counter(b"c"))
    kv.commit(batch)
    assert kv.multi_get([keys.inode(5), keys.counter(b"c")]) == [None, None]


def test_last_op_on_a_key_in_a_batch_wins(kv):
    batch = Batch()
    batch.put(keys.inode(5), b"first")
    batch.delete(keys.inode(5))
    batch.put(keys.inode(6), b"gone")
    batch.delete(keys.inode(6))
    batch.put(keys.inode(6), b"second")
    kv.commit(batch)
    assert kv.multi_get([keys.inode(5), keys.inode(6)]) == [None, b"second"]


def test_scan_prefix_is_ordered_and_bounded(kv):
    put_all(kv, sample([4, 5, 6]))
    put_all(kv, {keys.dentry(5, n): n for n in [b"zz", b"m", b"a0", b"\xff"]})
    got = [k[9:] for k, _ in kv.scan(keys.dentry_prefix(5))]
    assert got == [b"a", b"a0", b"b", b"m", b"zz", b"\xff"]


def test_scan_start_is_inclusive(kv):
    put_all(kv, {keys.dentry(5, n): n for n in [b"a", b"b", b"c", b"d"]})
    prefix = keys.dentry_prefix(5)
    assert [v for _, v in kv.scan(prefix, prefix + b"b")] == [b"b", b"c", b"d"]
    assert [v for _, v in kv.scan(prefix, prefix + b"bb")] == [b"c", b"d"]
    assert list(kv.scan(prefix, prefix + b"e")) == []


def test_scan_of_block_map_from_index(kv):
    put_all(kv, {keys.block(9, i): keys.u64(i) for i in (0, 1, 2, 300, 70000)})
    put_all(kv, {keys.block(10, 0): b"other file"})
    got = [keys.read_u64(k, 9) for k, _ in kv.scan(keys.block_prefix(9), keys.block(9, 2))]
    assert got == [2, 300, 70000]


@pytest.mark.parametrize("tag", [keys.DENTRY, keys.INODE, keys.BLOCK, keys.XATTR, keys.SYMLINK])
def test_bare_tag_scan_visits_every_shard(kv, tag):
    inos = owners_in_distinct_shards(kv, SHARDS)
    items = sample(inos)
    put_all(kv, items)
    expected = {k: v for k, v in items.items() if k[:1] == tag}
    got = list(kv.scan(tag))
    assert len(got) == len(expected), "a key was visited twice or missed"
    assert dict(got) == expected


def test_volume_wide_tags_scan(kv):
    items = sample(owners_in_distinct_shards(kv, SHARDS))
    put_all(kv, items)
    assert dict(kv.scan(keys.UPLOAD)) == {k: v for k, v in items.items() if k[:1] == keys.UPLOAD}
    assert [keys.read_u64(k, 1) for k, _ in kv.scan(keys.ORPHAN)] == sorted(
        keys.read_u64(k, 1) for k in items if k[:1] == keys.ORPHAN
    )


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
