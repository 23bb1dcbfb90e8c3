"""The KVStore contract (aifs.meta.kv), held against every engine: reads, ordered scans,
atomic batches under their read set, counters and on-commit hooks."""

import errno
import random

import pytest

from aifs.meta import keys
from aifs.meta.kv import Batch, Conflict
from aifs.meta.writestate import MetaWriteFailed

from .conftest import NETWORK, eventually, write_all, run_together

OWNERS = range(1, 33)  # enough inodes that every shard of the embedded engine holds some
EDGE_OWNERS = (0, 0xFF, 0xFF00, 0x00FF00FF00FF00FF, 2**64 - 1)  # owners of 0x00 / 0xff bytes
BINARY_NAMES = [b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"a\x00", b"a\xff", b"\x7f", b"\x80",
                b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\xff"]


def sample(owners) -> dict[bytes, bytes]:
    """Keys of every tag for each owner, plus volume-wide ones."""
    items = {}
    for ino in owners:
        v = b"%d" % ino
        items[keys.inode(ino)] = b"inode" + v
        items[keys.dentry(ino, b"a")] = b"da" + v
        items[keys.dentry(ino, b"b")] = b"db" + v
        items[keys.block(ino, 0)] = b"b0" + v
        items[keys.block(ino, 256)] = b"b256" + v
        items[keys.xattr(ino, b"user.x")] = b"x" + v
        items[keys.symlink(ino)] = b"l" + v
        items[keys.orphan(ino)] = b""
        items[keys.pin(ino)] = b"nvme"
        items[keys.upload(ino)] = keys.u64(ino)
        items[keys.garbage(ino)] = v
    return items


def keys_of(scan) -> list[bytes]:
    return [key for key, _ in scan]


# -- point reads and writes ----------------------------------------------------------


def test_get_put_overwrite_delete(kv):
    key = keys.inode(7)
    assert kv.get(key) is None and kv.get_fresh(key) is None
    write_all(kv, {key: b"one"})
    assert kv.get(key) == kv.get_fresh(key) == b"one"
    write_all(kv, {key: b"two"})
    assert kv.get(key) == b"two"
    batch = Batch()
    batch.delete(key)
    batch.delete(keys.inode(8))  # deleting what is not there is no error
    kv.commit(batch)
    assert kv.get(key) is None and kv.get_fresh(key) is None


def test_multi_get_answers_in_the_order_asked(kv):
    items = sample(OWNERS)
    write_all(kv, items)
    for key, value in items.items():
        assert kv.get(key) == value
    wanted = list(items)
    random.Random(1).shuffle(wanted)
    missing = [keys.inode(123456), keys.counter(b"nothing"), keys.upload(2**40 + 1)]
    asked = [missing[0], *wanted, missing[1], wanted[0], missing[2]]
    assert kv.multi_get(asked) == [None, *(items[k] for k in wanted), None, items[wanted[0]], None]
    assert kv.multi_get([]) == []


def test_empty_and_binary_values_are_kept_exactly(kv):
    values = {keys.orphan(3): b"", keys.xattr(3, b"user.big"): bytes(range(256)) * 256,
              keys.dentry(3, b"z"): b"\x00", keys.inode(3): b"\xff" * 9}
    write_all(kv, values)
    assert kv.multi_get(list(values)) == list(values.values())
    assert kv.get(keys.orphan(3)) == b"", "an empty value is a value, not an absent key"
    assert dict(kv.scan(keys.orphan(3))) == {keys.orphan(3): b""}


def test_last_op_on_a_key_in_a_batch_wins(kv):
    batch = Batch()
    batch.put(keys.inode(5), b"first")
    batch.delete(keys.inode(5))
    batch.put(keys.inode(6), b"gone")
    batch.delete(keys.inode(6))
    batch.put(keys.inode(6), b"second")
    kv.commit(batch)
    assert kv.multi_get([keys.inode(5), keys.inode(6)]) == [None, b"second"]


def test_a_batch_spanning_every_shard_commits_whole(kv):
    items = sample(OWNERS)
    write_all(kv, items)
    batch = Batch()
    doomed = [keys.inode(ino) for ino in OWNERS[::2]]
    for key in doomed:
        batch.delete(key)
    for ino in OWNERS[1::2]:
        batch.put(keys.inode(ino), b"new")
    batch.add(keys.counter(b"n"), 3)
    kv.commit(batch)
    assert kv.multi_get(doomed) == [None] * len(doomed)
    assert set(kv.multi_get([keys.inode(ino) for ino in OWNERS[1::2]])) == {b"new"}
    assert kv.counter(keys.counter(b"n")) == 3


# -- scans -----------------------------------------------------------------------------


def test_scan_is_in_byte_order(kv):
    names = list(BINARY_NAMES) + [b"n%03d" % i for i in range(50)]
    shuffled = names[:]
    random.Random(2).shuffle(shuffled)
    for name in shuffled:
        write_all(kv, {keys.dentry(5, name): name})
    got = list(kv.scan(keys.dentry_prefix(5)))
    assert [k[9:] for k, _ in got] == sorted(names)
    assert all(k[9:] == v for k, v in got)


@pytest.mark.parametrize("ino", EDGE_OWNERS)
def test_scan_stays_inside_its_prefix(kv, ino):
    """Neighbours on either side of a prefix, however its bytes end (0x00, 0xff), stay out;
    a key equal to the prefix is inside it."""
    inside = {keys.dentry(ino, name): name for name in [b"", *BINARY_NAMES]}
    outside = {keys.inode(ino): b"inode", keys.block(ino, 0): b"block", keys.xattr(ino, b"user.a"): b"x"}
    for neighbour in {max(ino - 1, 0), min(ino + 1, 2**64 - 1)} - {ino}:
        outside[keys.dentry(neighbour, b"")] = b"neighbour"
        outside[keys.dentry(neighbour, b"\xff")] = b"neighbour"
    write_all(kv, inside | outside)
    assert keys_of(kv.scan(keys.dentry_prefix(ino))) == sorted(inside)


def test_scan_of_a_prefix_ending_in_0xff(kv):
    names = [b"a", b"\xfe", b"\xfe\xff", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x00"]
    write_all(kv, {keys.dentry(9, n): n for n in names} | {keys.dentry(10, b""): b"next owner"})
    prefix = keys.dentry_prefix(9)
    assert [k[9:] for k in keys_of(kv.scan(prefix + b"\xff"))] == [b"\xff", b"\xff\x00", b"\xff\xff",
                                                                   b"\xff\xff\x00"]
    assert [k[9:] for k in keys_of(kv.scan(prefix + b"\xff\xff"))] == [b"\xff\xff", b"\xff\xff\x00"]
    assert keys_of(kv.scan(prefix + b"\xff\xff\xff")) == []


def test_scan_start_is_inclusive(kv):
    write_all(kv, {keys.dentry(5, n): n for n in [b"a", b"b", b"c", b"d"]} | sample([4, 6]))
    prefix = keys.dentry_prefix(5)
    assert [v for _, v in kv.scan(prefix, prefix + b"b")] == [b"b", b"c", b"d"]
    assert [v for _, v in kv.scan(prefix, prefix + b"bb")] == [b"c", b"d"]
    assert [v for _, v in kv.scan(prefix, prefix + b"b\x00")] == [b"c", b"d"]
    assert [v for _, v in kv.scan(prefix, prefix)] == [b"a", b"b", b"c", b"d"]
    assert [v for _, v in kv.scan(prefix, keys.dentry_prefix(4))] == [b"a", b"b", b"c", b"d"], \
        "a start before the prefix scans it whole"
    assert list(kv.scan(prefix, prefix + b"e")) == []
    assert list(kv.scan(prefix, keys.dentry_prefix(6))) == []


def test_scan_of_a_block_map_from_an_index(kv):
    write_all(kv, {keys.block(9, i): keys.u64(i) for i in (0, 1, 2, 255, 256, 70000, 2**64 - 1)})
    write_all(kv, {keys.block(10, 0): b"other file", keys.block(8, 2**64 - 1): b"other file"})
    got = [keys.read_u64(k, 9) for k in keys_of(kv.scan(keys.block_prefix(9), keys.block(9, 2)))]
    assert got == [2, 255, 256, 70000, 2**64 - 1]


def test_a_long_scan(kv):
    """Thousands of keys under one prefix (a block map, a big directory) come whole, in
    order, and resumable from any of them."""
    wanted = [keys.block(9, i) for i in range(0, 3000, 3)] + [keys.block(9, 2**64 - 1 - i) for i in range(300)]
    write_all(kv, {key: key[9:] for key in wanted} | {keys.block(10, 0): b"", keys.block(8, 2**64 - 1): b""})
    wanted.sort()
    got = list(kv.scan(keys.block_prefix(9)))
    assert [k for k, _ in got] == wanted and all(k[9:] == v for k, v in got)
    for at in (1, 255, 256, 257, 511, 512, 1000, len(wanted) - 1):
        assert keys_of(kv.scan(keys.block_prefix(9), wanted[at])) == wanted[at:]


def test_scan_of_an_empty_range(kv):
    write_all(kv, sample([4, 6]))
    assert list(kv.scan(keys.dentry_prefix(5))) == []
    assert list(kv.scan(keys.block_prefix(5), keys.block(5, 3))) == []
    assert list(kv.scan(keys.LEASE)) == []


@pytest.mark.parametrize("tag", [keys.DENTRY, keys.INODE, keys.BLOCK, keys.XATTR, keys.SYMLINK,
                                 keys.ORPHAN, keys.PIN, keys.UPLOAD, keys.GARBAGE])
def test_bare_tag_scan_is_ordered_across_owners(kv, tag):
    """A whole tag (fsck's sweeps, a dump) comes in key order, however an engine spreads
    the owners of its keys."""
    items = sample([*OWNERS, *EDGE_OWNERS])
    write_all(kv, items)
    assert list(kv.scan(tag)) == sorted((k, v) for k, v in items.items() if k[:1] == tag)


def test_bare_tag_scan_from_a_start(kv):
    items = sample(OWNERS)
    write_all(kv, items)
    start = keys.block(17, 0)
    assert keys_of(kv.scan(keys.BLOCK, start)) == sorted(k for k in items if k[:1] == keys.BLOCK and k >= start)


def test_keys_changed_while_a_scan_runs(kv):
    """A scan that meets commits between its steps goes on in order: every key that exists
    for the whole scan comes exactly once; one added or removed meanwhile at most once
    (a directory listing relies on this, aifs.fuse.listing)."""
    prefix = keys.dentry_prefix(5)
    steady = {keys.dentry(5, b"k%03d" % i): b"old" for i in range(0, 60, 2)}
    doomed = [keys.dentry(5, b"k%03d" % i) for i in (21, 31, 51)]
    write_all(kv, steady | {k: b"doomed" for k in doomed})
    arrivals = [keys.dentry(5, name) for name in (b"a", b"k001", b"k0070", b"k041", b"k999")]  # behind and ahead
    seen = []
    for step, (key, value) in enumerate(kv.scan(prefix)):
        seen.append(key)
        assert value in (b"old", b"new", b"doomed")
        if step == 3:
            batch = Batch()
            for arrival in arrivals:
                batch.put(arrival, b"new")
            for key_ in doomed:
                batch.delete(key_)
            batch.delete(key)  # the key the scan stands on
            batch.put(keys.dentry(5, b"k040"), b"new")
            kv.commit(batch)
    assert seen == sorted(seen) and len(seen) == len(set(seen)), "out of order, or a key came twice"
    assert set(steady) <= set(seen)
    assert set(seen) <= set(steady) | set(doomed) | set(arrivals)


def test_a_scan_left_unfinished_does_not_block_commits(kv):
    write_all(kv, sample(OWNERS))
    first = next(kv.scan(keys.BLOCK))
    write_all(kv, {keys.block(99, 0): b"later"})
    assert kv.get(keys.block(99, 0)) == b"later"
    assert first[0][:1] == keys.BLOCK


# -- read sets and conflicts -----------------------------------------------------------------

KEY = keys.inode(42)
CHANGES = {
    "value changed": (b"v1", b"v2"),
    "expected absent, now present": (None, b"v"),
    "present, now deleted": (b"v", None),
    "empty value, now deleted": (b"", None),
    "expected absent, now an empty value": (None, b""),
}


def guarded(expected: bytes | None, ran: list) -> Batch:
    """A batch based on KEY holding `expected`, with writes across shards, a counter
    increment and an on-commit hook that records that it ran."""
    batch = Batch()
    batch.expect(KEY, expected)
    for ino in OWNERS:
        batch.put(keys.inode(ino), b"written")
        batch.delete(keys.dentry(ino, b"a"))
    batch.put(keys.upload(2**40), b"")
    batch.add(keys.counter(b"usage.inodes"), 5)
    batch.on_commit(lambda: ran.append(True))
    return batch


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_batch_whose_read_set_changed_conflicts_and_changes_nothing(kv, second_kv, change):
    before, after = CHANGES[change]
    items = sample(OWNERS)
    write_all(kv, items)
    if before is not None:
        write_all(kv, {KEY: before})
    kv.add(keys.counter(b"usage.inodes"), 1)
    ran = []
    batch = guarded(before, ran)
    write_all(second_kv(), {KEY: after})
    with pytest.raises(Conflict):
        kv.commit(batch)
    assert ran == [], "an on-commit hook ran for a batch that was refused"
    assert kv.get_fresh(KEY) == after, "the other client's change was lost"
    assert kv.multi_get(list(items)) == list(items.values())
    assert kv.get(keys.upload(2**40)) is None
    assert kv.counter(keys.counter(b"usage.inodes")) == 1


@pytest.mark.parametrize("before", [None, b"", b"v"])
def test_a_batch_whose_read_set_held_commits(kv, second_kv, before):
    if before is not None:
        write_all(kv, {KEY: before})
    write_all(second_kv(), {keys.inode(43): b"unrelated"})
    ran = []
    kv.commit(guarded(before, ran))
    assert ran == [True]
    assert kv.get(keys.inode(1)) == b"written" and kv.counter(keys.counter(b"usage.inodes")) == 5


def test_a_read_of_the_batch_s_own_key_guards_its_write(kv):
    write_all(kv, {KEY: b"v1"})
    batch = Batch()
    batch.expect(KEY, b"v1")
    batch.put(KEY, b"v1+1")
    kv.commit(batch)
    assert kv.get(KEY) == b"v1+1"
    stale = Batch()
    stale.expect(KEY, b"v1")
    stale.put(KEY, b"v1+1 again")
    with pytest.raises(Conflict):
        kv.commit(stale)
    assert kv.get_fresh(KEY) == b"v1+1"


def test_the_first_read_of_a_key_counts(kv):
    write_all(kv, {KEY: b"v1"})
    batch = Batch()
    batch.expect(KEY, b"v1")
    batch.expect(KEY, b"v2")  # a later read of the same key within one operation
    kv.commit(batch)
    batch = Batch()
    batch.expect(KEY, b"v2")
    batch.expect(KEY, b"v1")
    with pytest.raises(Conflict):
        kv.commit(batch)


def test_reads_of_many_keys_across_shards_all_count(kv, second_kv):
    items = sample(OWNERS)
    write_all(kv, items)
    for changed in (keys.inode(OWNERS[-1]), keys.dentry(OWNERS[0], b"new"), keys.VOLUME):
        batch = Batch()
        for key in [*items, keys.dentry(OWNERS[0], b"new"), keys.VOLUME]:
            batch.expect(key, items.get(key))
        batch.put(keys.inode(1000), b"x")
        write_all(second_kv(), {changed: b"changed"})
        with pytest.raises(Conflict):
            kv.commit(batch)
        write_all(second_kv(), {changed: items.get(changed)})
    assert kv.get_fresh(keys.inode(1000)) is None


def test_expect_empty_conflicts_when_a_key_appears_in_the_range(kv, second_kv):
    prefix = keys.dentry_prefix(5)
    write_all(kv, {keys.dentry(4, b"\xff"): b"", keys.dentry(6, b""): b"", keys.inode(5): b"dir"})
    batch = Batch()
    batch.expect_empty(prefix)
    batch.delete(keys.inode(5))
    kv.commit(batch)  # neighbours on both sides are not in the range
    for name in (b"", b"\x00", b"x", b"\xff\xff"):
        batch = Batch()
        batch.expect_empty(prefix)
        batch.put(keys.inode(77), b"x")
        write_all(second_kv(), {keys.dentry(5, name): b"child"})
        with pytest.raises(Conflict):
            kv.commit(batch)
        write_all(second_kv(), {keys.dentry(5, name): None})
    assert kv.get_fresh(keys.inode(77)) is None


def test_expect_empty_holds_against_the_state_before_the_batch(kv):
    """The batch's own writes into the range it expects empty do not count against it."""
    batch = Batch()
    batch.expect_empty(keys.dentry_prefix(5))
    batch.put(keys.dentry(5, b"first"), b"")
    kv.commit(batch)
    assert keys_of(kv.scan(keys.dentry_prefix(5))) == [keys.dentry(5, b"first")]


def test_expect_empty_of_a_range_emptied_meanwhile_commits(kv, second_kv):
    write_all(kv, {keys.dentry(5, b"a"): b""})
    write_all(second_kv(), {keys.dentry(5, b"a"): None})
    batch = Batch()
    batch.expect_empty(keys.dentry_prefix(5))
    batch.put(keys.inode(5), b"empty")
    kv.commit(batch)
    assert kv.get(keys.inode(5)) == b"empty"


def test_a_change_is_seen_by_another_client(kv, second_kv):
    """At once through get_fresh; through get and multi_get (which a node-local cache may
    answer) once the change has reached that client, after any copy it had read before."""
    other, absent = second_kv(), keys.dentry(1, b"later")
    write_all(kv, {KEY: b"v1"})
    assert eventually(lambda: other.get(KEY), b"v1") == b"v1"
    assert other.get(absent) is None
    write_all(kv, {KEY: b"v2", absent: b"here"})
    assert eventually(lambda: other.get(KEY), b"v2") == b"v2"
    assert eventually(lambda: other.multi_get([absent, KEY]), [b"here", b"v2"]) == [b"here", b"v2"]
    write_all(kv, {KEY: b"v3"})
    assert other.get_fresh(KEY) == b"v3", "get_fresh answers from the engine itself"
    write_all(kv, {KEY: None})
    assert eventually(lambda: other.get(KEY), None) is None
    assert keys_of(other.scan(keys.INODE)) == []


# -- counters ------------------------------------------------------------------------------


def test_counters_start_at_zero_and_add_returns_the_new_value(kv):
    c = keys.counter(b"next_ino")
    assert kv.counter(c) == 0
    assert kv.add(c, 5) == 5
    assert kv.add(c, -7) == -2
    assert kv.counter(c) == -2
    assert kv.add(c, 2**62) == 2**62 - 2
    assert kv.counter(keys.counter(b"next_block")) == 0, "counters are independent"


def test_batch_add_moves_counters_with_the_batch_s_writes(kv):
    inodes, nbytes = keys.counter(b"usage.inodes"), keys.counter(b"usage.bytes")
    kv.add(inodes, 10)
    batch = Batch()
    batch.put(keys.inode(3), b"file")
    batch.add(inodes, 1)
    batch.add(nbytes, 4096)
    batch.add(inodes, 2)
    batch.add(nbytes, -96)
    kv.commit(batch)
    assert (kv.get(keys.inode(3)), kv.counter(inodes), kv.counter(nbytes)) == (b"file", 13, 4000)


def test_counters_from_two_clients_add_up(kv, second_kv):
    other = second_kv()
    c = keys.counter(b"usage.bytes")
    returned = []
    for i in range(200):
        client = kv if i % 3 else other
        if i % 2:
            returned.append(client.add(c, 1))
        else:
            batch = Batch()
            batch.add(c, 1)
            batch.put(keys.upload(i), b"")
            client.commit(batch)
    assert returned == sorted(returned) and len(set(returned)) == len(returned)
    assert other.add(c, 0) == kv.add(c, 0) == 200
    assert eventually(lambda: other.counter(c), 200) == 200
    assert eventually(lambda: kv.counter(c), 200) == 200


@NETWORK
def test_counters_moved_by_two_threads_at_once(store):
    c = keys.counter(b"next_block")

    def adder(client) -> list[int]:
        seen = []
        for i in range(300):
            seen.append(client.add(c, 1))
            batch = Batch()
            batch.add(c, 2)
            client.commit(batch)
        return seen

    first, second = run_together(lambda: adder(store.client()), lambda: adder(store.client()))
    assert not set(first) & set(second), "two clients were handed the same counter value"
    assert store.client().counter(c) == 2 * 300 * 3


@pytest.mark.parametrize("store", ["redis"], indirect=True)
def test_a_reader_never_sees_half_a_batch(store):
    """A batch becomes visible whole to other clients (a node-local cache may serve keys of
    different ages, so this holds the uncached engine; its commits catch stale reads)."""
    writer, reader = store.client(), store.client()
    spread = [keys.inode(ino) for ino in OWNERS]
    write_all(writer, dict.fromkeys(spread, b"0"))
    rounds = 150

    def write_generations() -> None:
        for generation in range(1, rounds + 1):
            write_all(writer, dict.fromkeys(spread, b"%d" % generation))

    def read_until_last() -> int:
        reads = 0
        while True:
            values = set(reader.multi_get(spread))
            assert len(values) == 1, f"a reader saw a batch half applied: {sorted(values)}"
            reads += 1
            if values == {b"%d" % rounds}:
                return reads

    run_together(write_generations, read_until_last)


# -- read-only clients -----------------------------------------------------------------------


@pytest.mark.parametrize("store", ["rocksdb", "redis", "redis-cached"], indirect=True)
def test_a_read_only_client_reads_everything_and_changes_nothing(store, kv):
    c = keys.counter(b"usage.inodes")
    write_all(kv, {KEY: b"v", keys.orphan(3): b""})
    kv.add(c, 2)
    reader = store.client(read_only=True)
    assert (reader.get(KEY), reader.multi_get([keys.orphan(3)]), reader.counter(c)) == (b"v", [b""], 2)
    assert keys_of(reader.scan(keys.INODE)) == [KEY]
    assert not reader.writable()
    ran = []
    batch = Batch()
    batch.put(KEY, b"changed")
    batch.add(c, 1)
    batch.on_commit(lambda: ran.append(True))
    with pytest.raises(MetaWriteFailed) as refused:
        reader.commit(batch)
    assert refused.value.errno == errno.EROFS
    with pytest.raises(MetaWriteFailed):
        reader.add(c, 1)
    assert ran == [] and (kv.get_fresh(KEY), kv.counter(c)) == (b"v", 2)


# -- on-commit hooks -----------------------------------------------------------------------------


def test_on_commit_hooks_run_once_in_order_after_the_batch_is_stored(kv):
    ran = []
    batch = Batch()
    batch.put(KEY, b"stored")
    batch.add(keys.counter(b"usage.inodes"), 1)
    batch.on_commit(lambda: ran.append(("first", kv.get(KEY), kv.counter(keys.counter(b"usage.inodes")))))
    batch.on_commit(lambda: ran.append(("second", kv.get(KEY), None)))
    kv.commit(batch)
    assert ran == [("first", b"stored", 1), ("second", b"stored", None)]


def test_on_commit_hooks_of_a_batch_without_writes_run(kv):
    ran = []
    batch = Batch()
    batch.expect(KEY, None)
    batch.on_commit(lambda: ran.append(True))
    kv.commit(batch)
    assert ran == [True]
