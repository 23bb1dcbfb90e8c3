"""Many writers on one store: two MetaEngines (two nodes) change one namespace at once.

Races are staged two ways. In one thread, on every engine: an Interleaved client runs the
other node's operation between this operation's reads and its commit, so the commit meets
a changed read set and the operation reruns on fresh reads. With real threads, on the
network engines. Either way the namespace must come out whole (`audit`) and each racing
operation must end as POSIX would have it had they run one after the other.
"""

import errno
import random
import stat

import msgpack
import pytest

from aifs.errors import FsError
from aifs.meta import MetaEngine, keys
from aifs.meta.attrs import BlockRef
from aifs.meta.ids import IdAllocator
from aifs.meta.kv import Batch
from aifs.meta.packs import PackMember
from aifs.meta.sessions import Session
from aifs.meta.usage import INODES
from tests.unit.conftest import BS, FAR_FUTURE, FILE, ROOT, entry, fs_error, mkdir, mkfile, names, never_open, nlink

from .conftest import NETWORK, Interleaved, Store, audit, eventually, run_together

DIR = stat.S_IFDIR | 0o755
RENAME_EXCHANGE = 2


def two_nodes(store: Store) -> tuple[MetaEngine, MetaEngine]:
    """Two nodes of one volume, each a MetaEngine on its own Interleaved client."""
    return MetaEngine(Interleaved(store.client()), BS), MetaEngine(Interleaved(store.client()), BS)


@pytest.fixture
def nodes(store) -> tuple[MetaEngine, MetaEngine]:
    """two_nodes, whose namespace must pass `audit` when the test is done."""
    yield two_nodes(store)
    audit(store.client())


def errno_of(operation) -> int:
    """0 when `operation` succeeds, else the errno of the FsError it raised."""
    try:
        operation()
    except FsError as e:
        return e.errno
    return 0


def lookup_errno(node: MetaEngine, parent: int, name: bytes) -> int:
    return errno_of(lambda: node.lookup(parent, name))


def test_a_node_sees_what_another_node_changed(nodes):
    """Lookups and attributes a node has read (and may keep in a node-local cache) follow
    another node's creates, changes and removals."""
    a, b = nodes
    assert lookup_errno(b, ROOT, b"f") == errno.ENOENT
    f = mkfile(a, b"f")
    assert eventually(lambda: lookup_errno(b, ROOT, b"f"), 0) == 0
    assert b.getattr(f).mode == FILE
    a.setattr(f, mode=FILE & ~0o777 | 0o600)
    assert eventually(lambda: stat.S_IMODE(b.getattr(f).mode), 0o600) == 0o600
    a.set_xattr(f, b"user.k", b"v1")
    assert eventually(lambda: errno_of(lambda: b.get_xattr(f, b"user.k")), 0) == 0
    a.set_xattr(f, b"user.k", b"v2")
    assert eventually(lambda: b.get_xattr(f, b"user.k"), b"v2") == b"v2"
    a.unlink(ROOT, b"f", never_open)
    assert eventually(lambda: lookup_errno(b, ROOT, b"f"), errno.ENOENT) == errno.ENOENT
    assert eventually(lambda: errno_of(lambda: b.getattr(f)), errno.ENOENT) == errno.ENOENT


# -- formatting and ids ------------------------------------------------------------------


def test_two_nodes_formatting_one_store_at_once_make_one_volume(store):
    first, second = Interleaved(store.client()), store.client()
    joined = []
    first.before_commit(lambda: joined.append(MetaEngine(second, BS)))
    a = MetaEngine(first, BS)
    assert a.volume == joined[0].volume
    audit(store.client())


def test_two_nodes_opening_a_volume_with_totals_kept_the_old_way(store):
    MetaEngine(store.client(), BS)
    old = Batch()
    old.put(keys.counter(b"usage"), msgpack.packb([1, 0]))  # one msgpack pair, as single-node volumes kept it
    old.add(INODES, -1)
    store.client().commit(old)
    first, second = Interleaved(store.client()), store.client()
    joined = []
    first.before_commit(lambda: joined.append(MetaEngine(second, BS)))
    assert MetaEngine(first, BS).volume_stats() == joined[0].volume_stats() == (1, 0)
    audit(store.client())


def test_ids_of_two_engines_never_collide(nodes):
    rng = random.Random(3)
    blocks = [rng.choice(nodes).block_ids.next() for _ in range(10000)]
    assert len(set(blocks)) == len(blocks)
    small = [IdAllocator(node.kv, b"test", 1, chunk=7) for node in nodes]
    ids = [rng.choice(small).next() for _ in range(2000)]
    assert len(set(ids)) == len(ids) and min(ids) >= 1
    inos = [mkfile(rng.choice(nodes), b"f%d" % i) for i in range(100)]
    assert len(set(inos)) == 100 and ROOT not in inos


@NETWORK
def test_ids_reserved_by_two_threads_never_collide(store):
    def allocate() -> list[int]:
        ids = IdAllocator(store.client(), b"test", 1, chunk=5)
        return [ids.next() for _ in range(3000)]

    first, second = run_together(allocate, allocate)
    assert len(set(first) | set(second)) == 6000


# -- creates -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [FILE, DIR])
def test_two_creates_of_one_name_one_wins(nodes, mode):
    a, b = nodes
    won = []
    a.kv.before_commit(lambda: won.append(b.create(ROOT, b"x", mode, 0, 0)[0]))
    with fs_error(errno.EEXIST):
        a.create(ROOT, b"x", mode, 0, 0)
    assert entry(a, ROOT, b"x") == entry(b, ROOT, b"x") == won[0]


@NETWORK
def test_two_threads_creating_the_same_names(store):
    wanted = [b"n%03d" % i for i in range(120)]
    root = MetaEngine(store.client(), BS)
    d = mkdir(root, b"d")

    def create_all() -> list[int]:
        node = MetaEngine(store.client(), BS)
        return [errno_of(lambda n=n: mkfile(node, n, parent=d)) for n in wanted]

    first, second = run_together(create_all, create_all)
    assert all(sorted(pair) == [0, errno.EEXIST] for pair in zip(first, second)), \
        "a name was created twice, or by neither"
    assert names(root, d) == wanted
    audit(store.client())


def test_mkdirs_racing_in_one_parent_keep_its_nlink(nodes):
    a, b = nodes
    p = mkdir(a, b"p")
    for i in range(15):
        a.kv.before_commit(lambda i=i: mkdir(b, b"b%d" % i, parent=p))
        mkdir(a, b"a%d" % i, parent=p)
    for i in range(0, 15, 3):
        b.kv.before_commit(lambda i=i: a.rmdir(p, b"a%d" % i))
        b.rmdir(p, b"b%d" % i)
    assert eventually(lambda: nlink(a, p), 22) == eventually(lambda: nlink(b, p), 22) == 2 + 30 - 10


@NETWORK
def test_mkdirs_of_two_threads_in_one_parent(store):
    p = mkdir(MetaEngine(store.client(), BS), b"p")

    def make_and_remove(tag: bytes) -> None:
        node = MetaEngine(store.client(), BS)
        for i in range(60):
            mkdir(node, tag + b"%d" % i, parent=p)
            if i % 3 == 0:
                node.rmdir(p, tag + b"%d" % (i // 2))

    run_together(lambda: make_and_remove(b"a"), lambda: make_and_remove(b"b"))
    assert nlink(MetaEngine(store.client(), BS), p) == 2 + 2 * (60 - 20)
    audit(store.client())


# -- removal racing creation -----------------------------------------------------------------


INTO_DIRECTORY = {
    "create": lambda node, d: mkfile(node, b"new", parent=d),
    "mkdir": lambda node, d: mkdir(node, b"new", parent=d),
    "symlink": lambda node, d: node.create(d, b"new", stat.S_IFLNK | 0o777, 0, 0, target=b"x"),
    "link": lambda node, d: node.link(entry(node, ROOT, b"f"), d, b"new"),
    "rename": lambda node, d: node.rename(ROOT, b"f", d, b"new", 0, never_open),
}


@pytest.mark.parametrize("into", list(INTO_DIRECTORY))
def test_an_entry_made_first_makes_the_rmdir_fail(nodes, into):
    a, b = nodes
    d = mkdir(a, b"d")
    mkfile(a, b"f")
    a.kv.before_commit(lambda: INTO_DIRECTORY[into](b, d))
    with fs_error(errno.ENOTEMPTY):
        a.rmdir(ROOT, b"d")
    assert names(a, d) == [b"new"]


@pytest.mark.parametrize("into", list(INTO_DIRECTORY))
def test_an_rmdir_made_first_makes_the_new_entry_fail(store, nodes, into):
    a, b = nodes
    d = mkdir(a, b"d")
    mkfile(a, b"f")
    b.kv.before_commit(lambda: a.rmdir(ROOT, b"d"))
    with fs_error(errno.ENOENT):
        INTO_DIRECTORY[into](b, d)
    assert names(a) == [b"f"] and list(store.client().scan(keys.dentry_prefix(d))) == []


@NETWORK
def test_rmdir_and_create_inside_racing_in_threads(store):
    setup = MetaEngine(store.client(), BS)
    dirs = [mkdir(setup, b"d%d" % i) for i in range(40)]

    def remove_all() -> list[int]:
        node = MetaEngine(store.client(), BS)
        return [errno_of(lambda i=i: node.rmdir(ROOT, b"d%d" % i)) for i in range(len(dirs))]

    def create_in_all() -> list[int]:
        node = MetaEngine(store.client(), BS)
        return [errno_of(lambda d=d: mkfile(node, b"f", parent=d)) for d in dirs]

    removed, created = run_together(remove_all, create_in_all)
    outcomes = set(zip(removed, created))
    assert outcomes <= {(0, errno.ENOENT), (errno.ENOTEMPTY, 0)}, f"outcomes (rmdir, create): {outcomes}"
    audit(store.client())


# -- removal racing changes to the file ---------------------------------------------------------


FILE_CHANGES = {
    "xattr": lambda node, f: node.set_xattr(f, b"user.k", b"v"),
    "blocks": lambda node, f: node.commit_blocks(f, {0: BlockRef(node.block_ids.next(), 0, 100, 0)}, 100),
    "truncate": lambda node, f: node.truncate(f, 10, None),
    "setattr": lambda node, f: node.setattr(f, mode=FILE & ~0o777 | 0o600),
    "atime": lambda node, f: node.set_atime(f, 12345),
    "link": lambda node, f: node.link(f, ROOT, b"twin"),
}


@pytest.mark.parametrize("change", list(FILE_CHANGES))
def test_a_file_changed_while_it_is_removed_leaves_nothing_behind(nodes, change):
    a, b = nodes
    f = mkfile(a, b"f")
    a.kv.before_commit(lambda: FILE_CHANGES[change](b, f))
    a.unlink(ROOT, b"f", never_open)
    if change == "link":
        assert names(a) == [b"twin"] and nlink(a, f) == 1
    else:
        with fs_error(errno.ENOENT):
            a.getattr(f)


@pytest.mark.parametrize("change", list(FILE_CHANGES))
def test_a_change_to_a_file_removed_first_fails(nodes, change):
    a, b = nodes
    f = mkfile(a, b"f")
    b.kv.before_commit(lambda: a.unlink(ROOT, b"f", never_open))
    with fs_error(errno.ENOENT):
        FILE_CHANGES[change](b, f)
    assert names(a) == [] and b.pending_uploads() == {}


def test_two_nodes_reclaiming_one_orphan_free_it_once(nodes):
    a, b = nodes
    f = mkfile(a, b"f")
    a.commit_blocks(f, {0: BlockRef(a.block_ids.next(), 0, 700, 0)}, 700)
    a.unlink(ROOT, b"f", lambda _: True)
    a.kv.before_commit(lambda: b.reclaim(f))
    a.reclaim(f)
    assert a.orphans() == [] and a.volume_stats() == (1, 0)


def test_a_pin_set_while_the_file_is_removed_does_not_outlive_it(store):
    a, b = two_nodes(store)
    f = mkfile(a, b"f")
    a.kv.before_commit(lambda: b.unlink(ROOT, b"f", never_open))
    try:
        a.set_pin(f, "nvme")
    except FsError as e:
        assert e.errno == errno.ENOENT
    assert f not in a.pins()


# -- what belongs to one node ------------------------------------------------------------------


def test_uploads_belong_to_the_node_that_staged_them(store, kv):
    a, b = MetaEngine(kv, BS, node=b"n1"), MetaEngine(store.client(), BS, node=b"n2")
    f = mkfile(a, b"f")
    x, y = a.block_ids.next(), b.block_ids.next()
    a.commit_blocks(f, {0: BlockRef(x, 0, 10, 77)}, 10)
    b.commit_blocks(f, {1: BlockRef(y, 0, 10, 88)}, BS + 10)
    assert (a.pending_uploads(), b.pending_uploads()) == ({x: 77}, {y: 88})
    assert (b.staged_on(x), a.staged_on(y)) == ("n1", "n2")
    a.uploads_done([x])
    assert b.staged_on(x) is None and not b.is_pending(x) and b.is_pending(y)
    audit(store.client())


def test_the_pack_of_a_node_taken_for_dead_is_abandoned_and_its_blocks_stay_queued(store, kv):
    """Node n1 puts a pack; n2 takes n1 for dead and abandons it. When n1 comes back, its
    commit records no pack and clears no upload record: its blocks go up again."""
    a, b = MetaEngine(kv, BS, node=b"n1"), MetaEngine(store.client(), BS, node=b"n2")
    f = mkfile(a, b"f")
    x, y = a.block_ids.next(), a.block_ids.next()
    a.commit_blocks(f, {0: BlockRef(x, 0, 10, 77), 1: BlockRef(y, 0, 10, 88)}, BS + 10)
    pack = a.new_pack()
    assert b.unfinished_elsewhere() == {pack: "n1"} and a.unfinished_elsewhere() == {}
    assert b.abandon_elsewhere({pack: "n1"}) == [pack]
    members = [PackMember(x, 0, 10, 77), PackMember(y, 10, 10, 88)]
    assert a.uploads_done([x, y], {pack: members}) == [x, y]
    assert a.pending_uploads() == {x: 77, y: 88}
    assert a.pack_ids() == set() and a.slot_of(x) is None and pack in a.garbage_due(now_ns=FAR_FUTURE)
    audit(store.client())


def test_a_pack_recorded_before_the_others_abandon_it_is_kept(store, kv):
    a, b = MetaEngine(kv, BS, node=b"n1"), MetaEngine(store.client(), BS, node=b"n2")
    f = mkfile(a, b"f")
    x = a.block_ids.next()
    a.commit_blocks(f, {0: BlockRef(x, 0, 10, 77)}, 10)
    pack = a.new_pack()
    seen = b.unfinished_elsewhere()
    assert a.uploads_done([x], {pack: [PackMember(x, 0, 10, 77)]}) == []
    assert b.abandon_elsewhere(seen) == []
    assert b.pack_ids() == {pack} and b.slot_of(x) is not None and not b.is_pending(x)
    audit(store.client())


@NETWORK
def test_a_hold_taken_while_the_last_unlink_commits_keeps_the_file(nodes):
    a, b = nodes
    f = mkfile(a, b"f")
    session = Session(b.kv, "n2", "/mnt/aifs", "test", 30.0, lambda: [])
    a.kv.before_commit(lambda: session.hold(f))
    a.unlink(ROOT, b"f", never_open)
    assert a.orphans() == [f], "a file another session holds open was freed"
    a.reclaim(f)
    assert a.orphans() == [f] and a.getattr(f).nlink == 0
    session.let_go([f])
    a.reclaim(f)
    assert a.orphans() == [] and a.volume_stats() == (1, 0)


@NETWORK
def test_a_hold_on_a_file_unlinked_first_is_refused(store, nodes):
    a, b = nodes
    f = mkfile(a, b"f")
    session = Session(b.kv, "n2", "/mnt/aifs", "test", 30.0, lambda: [])
    b.kv.before_commit(lambda: a.unlink(ROOT, b"f", never_open))
    assert session.hold(f) is None
    assert a.orphans() == [] and list(store.client().scan(keys.holder_prefix(f))) == []


# -- renames racing renames -----------------------------------------------------------------------


def move_c_under_b(node: MetaEngine) -> None:
    """/c -> /a/b/c"""
    node.rename(ROOT, b"c", entry(node, entry(node, ROOT, b"a"), b"b"), b"c", 0, never_open)


def move_a_under_c(node: MetaEngine) -> None:
    """/a -> /c/a"""
    node.rename(ROOT, b"a", entry(node, ROOT, b"c"), b"a", 0, never_open)


def swap_c_with_b(node: MetaEngine) -> None:
    """/c <-> /a/b: c goes under a"""
    node.rename(ROOT, b"c", entry(node, ROOT, b"a"), b"b", RENAME_EXCHANGE, never_open)


@pytest.mark.parametrize("first, second", [(move_c_under_b, move_a_under_c), (move_a_under_c, move_c_under_b),
                                           (move_a_under_c, swap_c_with_b)])
def test_a_rename_racing_a_rename_of_an_ancestor_makes_no_loop(nodes, first, second):
    """Each alone is fine; after the first, the second would put a directory inside itself."""
    a, b = nodes
    mkdir(a, b"b", parent=mkdir(a, b"a"))
    mkdir(a, b"c")
    a.kv.before_commit(lambda: first(b))
    with fs_error(errno.EINVAL):
        second(a)


@NETWORK
def test_renames_into_each_other_in_threads(store):
    setup = MetaEngine(store.client(), BS)
    parents = [mkdir(setup, b"p%d" % i) for i in range(30)]
    for p in parents:
        mkdir(setup, b"x", parent=p)
        mkdir(setup, b"y", parent=p)

    def move_all(source: bytes, target: bytes) -> list[int]:
        node = MetaEngine(store.client(), BS)
        return [errno_of(lambda p=p: node.rename(p, source, entry(node, p, target), source, 0, never_open))
                for p in parents]

    x_into_y, y_into_x = run_together(lambda: move_all(b"x", b"y"), lambda: move_all(b"y", b"x"))
    for outcome in zip(x_into_y, y_into_x):
        assert sorted(outcome) in ([0, errno.EINVAL], [0, errno.ENOENT]), f"outcomes: {outcome}"
    audit(store.client())


# -- usage totals under interleaved operations --------------------------------------------------------

NAMES = [b"n%d" % i for i in range(6)]


def random_operation(node: MetaEngine, d: int, rng: random.Random) -> None:
    """One namespace change on a few shared names in `d`; errors of the race are expected."""
    name, other = rng.sample(NAMES, 2)

    def file_named(n: bytes) -> int:
        ino, attrs = node.lookup(d, n)
        if attrs.is_dir:
            raise FsError(errno.EISDIR, f"{n!r} is a directory")
        return ino

    operations = (
        lambda: mkfile(node, name, parent=d),
        lambda: mkdir(node, name, parent=d),
        lambda: node.commit_blocks(file_named(name), {
            rng.randrange(4): BlockRef(node.block_ids.next(), 0, rng.randrange(1, 5000), 0)}, 4 * BS),
        lambda: node.truncate(file_named(name), rng.randrange(3 * BS), None),
        lambda: node.unlink(d, name, lambda _: rng.random() < 0.3),
        lambda: node.rmdir(d, name),
        lambda: node.link(file_named(name), d, other),
        lambda: node.rename(d, name, d, other, 0, lambda _: rng.random() < 0.3),
        lambda: [node.reclaim(ino) for ino in node.orphans()],
    )
    try:
        rng.choice(operations)()
    except FsError as e:
        assert e.errno in (errno.ENOENT, errno.EEXIST, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY,
                           errno.EPERM), e


def test_usage_totals_stay_exact_under_interleaved_operations(nodes):
    rng = random.Random(5)
    d = mkdir(nodes[0], b"d")
    for _ in range(300):
        actor, other = rng.sample(nodes, 2)
        if rng.random() < 0.5:
            actor.kv.before_commit(lambda other=other: random_operation(other, d, rng))
        random_operation(actor, d, rng)
        actor.kv.drop_pending()
    assert nodes[0].volume_stats() == nodes[1].volume_stats()
    assert nodes[0].garbage_due(now_ns=FAR_FUTURE) or nodes[0].pending_uploads(), "the script wrote no blocks"


@NETWORK
def test_usage_totals_stay_exact_under_operations_of_two_threads(store):
    d = mkdir(MetaEngine(store.client(), BS), b"d")

    def work(seed: int) -> None:
        node, rng = MetaEngine(store.client(), BS), random.Random(seed)
        for _ in range(300):
            random_operation(node, d, rng)

    run_together(lambda: work(1), lambda: work(2))
    audit(store.client())
