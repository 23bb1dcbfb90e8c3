"""MetaEngine on every metadata engine, driven directly without FUSE: namespace rules,
block map, queues, pins, usage totals, ids, and what a reopened store still holds."""

import errno
import os
import stat

import pytest

from aifs.meta import MetaEngine
from aifs.meta.engine import DIR_SIZE
from tests.unit.conftest import (
    BS, FAR_FUTURE, FILE, ROOT, always_open, entry, fs_error, mkdir, mkfile, names, never_open, nlink, ref,
)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


# -- creation ----------------------------------------------------------------


def test_root_exists_after_format(meta):
    root = meta.getattr(ROOT)
    assert stat.S_ISDIR(root.mode) and root.nlink == 2
    assert meta.lookup(ROOT, b"..")[0] == ROOT
    assert meta.volume_stats() == (1, 0)


def test_create_regular_file(meta):
    ino, node = meta.create(ROOT, b"f", FILE, 1000, 2000)
    assert ino != ROOT
    got = meta.getattr(ino)
    assert got == node
    assert (got.mode, got.uid, got.gid, got.nlink, got.size) == (FILE, 1000, 2000, 1, 0)
    assert got.atime_ns == got.mtime_ns == got.ctime_ns > 0
    assert meta.lookup(ROOT, b"f") == (ino, got)


def test_create_directory(meta):
    before = meta.getattr(ROOT)
    d = mkdir(meta, b"d")
    node = meta.getattr(d)
    assert node.is_dir and node.nlink == 2 and node.size == DIR_SIZE and node.parent == ROOT
    root = meta.getattr(ROOT)
    assert root.nlink == before.nlink + 1
    assert root.mtime_ns >= before.mtime_ns and root.ctime_ns == root.mtime_ns
    assert meta.lookup(d, b"..")[0] == ROOT
    assert meta.lookup(d, b".")[0] == d


def test_create_symlink(meta):
    ino, node = meta.create(ROOT, b"l", stat.S_IFLNK | 0o777, 0, 0, target=b"some/where")
    assert stat.S_ISLNK(meta.getattr(ino).mode)
    assert meta.getattr(ino).size == len(b"some/where")
    assert meta.readlink(ino) == b"some/where"


def test_readlink_of_a_file_is_einval(meta):
    with fs_error(errno.EINVAL):
        meta.readlink(mkfile(meta, b"f"))


@pytest.mark.parametrize("kind", [stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK])
def test_create_special_files_keep_rdev(meta, kind):
    rdev = os.makedev(1, 3) if kind in (stat.S_IFCHR, stat.S_IFBLK) else 0
    ino, _ = meta.create(ROOT, b"n", kind | 0o600, 0, 0, rdev=rdev)
    node = meta.getattr(ino)
    assert stat.S_IFMT(node.mode) == kind and node.rdev == rdev and node.nlink == 1


def test_create_existing_name_is_eexist(meta):
    mkfile(meta, b"f")
    mkdir(meta, b"d")
    with fs_error(errno.EEXIST):
        mkfile(meta, b"f")
    with fs_error(errno.EEXIST):
        mkdir(meta, b"f")
    with fs_error(errno.EEXIST):
        mkfile(meta, b"d")


def test_create_in_missing_parent_is_enoent(meta):
    with fs_error(errno.ENOENT):
        mkfile(meta, b"f", parent=987654)


def test_create_under_a_file_is_enotdir(meta):
    f = mkfile(meta, b"f")
    with fs_error(errno.ENOTDIR):
        mkfile(meta, b"g", parent=f)
    with fs_error(errno.ENOTDIR):
        meta.lookup(f, b"g")


def test_create_in_removed_directory_is_enoent(meta):
    d = mkdir(meta, b"d")
    meta.rmdir(ROOT, b"d")
    with fs_error(errno.ENOENT):
        mkfile(meta, b"f", parent=d)


def test_name_length_limit(meta):
    mkfile(meta, b"x" * 255)
    with fs_error(errno.ENAMETOOLONG):
        mkfile(meta, b"y" * 256)
    f = mkfile(meta, b"f")
    with fs_error(errno.ENAMETOOLONG):
        meta.link(f, ROOT, b"z" * 256)
    with fs_error(errno.ENAMETOOLONG):
        meta.rename(ROOT, b"f", ROOT, b"z" * 256, 0, never_open)
    assert names(meta) == [b"f", b"x" * 255]


@pytest.mark.parametrize("bad", [b"", b"a/b", b"a\0b"])
def test_invalid_names_are_einval(meta, bad):
    with fs_error(errno.EINVAL):
        mkfile(meta, bad)


def test_lookup_missing_is_enoent(meta):
    with fs_error(errno.ENOENT):
        meta.lookup(ROOT, b"nope")
    with fs_error(errno.ENOENT):
        meta.getattr(424242)


def test_dir_nlink_counts_subdirectories_only(meta):
    a = mkdir(meta, b"a")
    for i in range(3):
        mkdir(meta, b"sub%d" % i, parent=a)
    mkfile(meta, b"file", parent=a)
    assert nlink(meta, a) == 5
    meta.rmdir(a, b"sub1")
    meta.unlink(a, b"file", never_open)
    assert nlink(meta, a) == 4


def test_setgid_directory_passes_group_and_bit(meta):
    shared = mkdir(meta, b"shared", mode=0o2775, gid=500)
    f = mkfile(meta, b"f", parent=shared, uid=1000, gid=1000)
    sub = mkdir(meta, b"sub", parent=shared, uid=1000, gid=1000)
    assert meta.getattr(f).gid == 500
    assert not meta.getattr(f).mode & stat.S_ISGID
    assert meta.getattr(sub).gid == 500
    assert meta.getattr(sub).mode & stat.S_ISGID
    deeper = mkfile(meta, b"g", parent=sub, gid=1000)
    assert meta.getattr(deeper).gid == 500


def test_no_setgid_keeps_callers_group(meta):
    plain = mkdir(meta, b"plain", gid=500)
    sub = mkdir(meta, b"sub", parent=plain, gid=1000)
    assert meta.getattr(sub).gid == 1000
    assert not meta.getattr(sub).mode & stat.S_ISGID


# -- links and removal ---------------------------------------------------------


def test_link_counts_and_shares_the_inode(meta):
    f = mkfile(meta, b"f")
    d = mkdir(meta, b"d")
    ctime = meta.getattr(f).ctime_ns
    node = meta.link(f, d, b"twin")
    assert node.nlink == 2 and nlink(meta, f) == 2
    assert entry(meta, d, b"twin") == f
    assert meta.getattr(f).ctime_ns >= ctime
    assert meta.volume_stats()[0] == 3


def test_link_rules(meta):
    f = mkfile(meta, b"f")
    d = mkdir(meta, b"d")
    with fs_error(errno.EPERM):
        meta.link(d, ROOT, b"dlink")
    with fs_error(errno.EEXIST):
        meta.link(f, ROOT, b"d")
    with fs_error(errno.ENOTDIR):
        meta.link(f, f, b"x")
    assert nlink(meta, f) == 1 and nlink(meta, d) == 2


def test_link_to_orphan_is_enoent(meta):
    f = mkfile(meta, b"f")
    meta.unlink(ROOT, b"f", always_open)
    with fs_error(errno.ENOENT):
        meta.link(f, ROOT, b"back")


def test_unlink_frees_the_last_link(meta):
    f = mkfile(meta, b"f")
    meta.link(f, ROOT, b"g")
    assert meta.unlink(ROOT, b"f", never_open) == f
    assert nlink(meta, f) == 1
    meta.unlink(ROOT, b"g", never_open)
    with fs_error(errno.ENOENT):
        meta.getattr(f)
    assert names(meta) == [] and meta.volume_stats() == (1, 0)


def test_unlink_errors(meta):
    mkdir(meta, b"d")
    f = mkfile(meta, b"f")
    with fs_error(errno.EISDIR):
        meta.unlink(ROOT, b"d", never_open)
    with fs_error(errno.ENOENT):
        meta.unlink(ROOT, b"nope", never_open)
    with fs_error(errno.ENOTDIR):
        meta.unlink(f, b"x", never_open)
    assert names(meta) == [b"d", b"f"]


def test_unlink_of_open_file_keeps_an_orphan_until_reclaim(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {0: ref(11, 500)}, 500)
    meta.set_xattr(f, b"user.a", b"v")
    meta.unlink(ROOT, b"f", always_open)
    assert names(meta) == []
    assert meta.orphans() == [f]
    node = meta.getattr(f)
    assert node.nlink == 0 and node.size == 500
    assert meta.block_refs(f, [0]) == {0: ref(11, 500)}
    assert meta.volume_stats() == (2, 500)
    meta.reclaim(f)
    assert meta.orphans() == []
    with fs_error(errno.ENOENT):
        meta.getattr(f)
    assert meta.all_block_refs(f) == {}
    assert meta.list_xattrs(f) == []
    assert meta.volume_stats() == (1, 0)
    assert 11 in meta.garbage_due(now_ns=FAR_FUTURE)
    assert 11 not in meta.pending_uploads()


def test_reclaim_leaves_linked_inode_alone(meta):
    f = mkfile(meta, b"f")
    meta.reclaim(f)
    assert nlink(meta, f) == 1
    meta.reclaim(999999)  # gone already: nothing to do, no error
    assert meta.orphans() == []


def test_orphans_lists_every_orphan(meta):
    inos = [mkfile(meta, b"f%d" % i) for i in range(5)]
    for i in range(5):
        meta.unlink(ROOT, b"f%d" % i, (lambda ino: ino != inos[2]))
    assert sorted(meta.orphans()) == sorted(inos[:2] + inos[3:])


def test_rmdir(meta):
    d = mkdir(meta, b"d")
    sub = mkdir(meta, b"sub", parent=d)
    mkfile(meta, b"f", parent=sub)
    with fs_error(errno.ENOTEMPTY):
        meta.rmdir(d, b"sub")
    with fs_error(errno.ENOTEMPTY):
        meta.rmdir(ROOT, b"d")
    with fs_error(errno.ENOTDIR):
        meta.rmdir(sub, b"f")
    with fs_error(errno.ENOENT):
        meta.rmdir(ROOT, b"nope")
    meta.unlink(sub, b"f", never_open)
    assert meta.rmdir(d, b"sub") == sub
    assert nlink(meta, d) == 2
    with fs_error(errno.ENOENT):
        meta.getattr(sub)
    meta.rmdir(ROOT, b"d")
    assert nlink(meta, ROOT) == 2 and meta.volume_stats() == (1, 0)


def test_rmdir_dot_names(meta):
    with fs_error(errno.EINVAL):
        meta.rmdir(ROOT, b".")
    with fs_error(errno.ENOTEMPTY):
        meta.rmdir(ROOT, b"..")


# -- rename ------------------------------------------------------------------


def rename(meta, src, dst, flags=0, is_open=never_open):
    (p1, n1), (p2, n2) = src, dst
    meta.rename(p1, n1, p2, n2, flags, is_open)


def test_rename_plain(meta):
    d = mkdir(meta, b"d")
    f = mkfile(meta, b"f")
    ctime = meta.getattr(f).ctime_ns
    rename(meta, (ROOT, b"f"), (d, b"g"))
    assert names(meta) == [b"d"] and names(meta, d) == [b"g"]
    assert entry(meta, d, b"g") == f and nlink(meta, f) == 1
    assert meta.getattr(f).ctime_ns >= ctime
    assert meta.volume_stats()[0] == 3


def test_rename_replaces_a_file(meta):
    f = mkfile(meta, b"f")
    g = mkfile(meta, b"g")
    meta.commit_blocks(g, {0: ref(5)}, 1000)
    rename(meta, (ROOT, b"f"), (ROOT, b"g"))
    assert names(meta) == [b"g"] and entry(meta, ROOT, b"g") == f
    with fs_error(errno.ENOENT):
        meta.getattr(g)
    assert meta.volume_stats() == (2, 0)
    assert 5 in meta.garbage_due(now_ns=FAR_FUTURE)


def test_rename_over_open_file_orphans_it(meta):
    mkfile(meta, b"f")
    g = mkfile(meta, b"g")
    rename(meta, (ROOT, b"f"), (ROOT, b"g"), is_open=always_open)
    assert meta.orphans() == [g] and nlink(meta, g) == 0


def test_rename_over_a_hard_link_keeps_the_inode(meta):
    mkfile(meta, b"f")
    g = mkfile(meta, b"g")
    meta.link(g, ROOT, b"g2")
    rename(meta, (ROOT, b"f"), (ROOT, b"g"))
    assert nlink(meta, g) == 1 and entry(meta, ROOT, b"g2") == g


def test_rename_dir_replaces_empty_dir(meta):
    a = mkdir(meta, b"a")
    b_parent = mkdir(meta, b"p")
    b = mkdir(meta, b"b", parent=b_parent)
    src = mkdir(meta, b"src", parent=a)
    rename(meta, (a, b"src"), (b_parent, b"b"))
    with fs_error(errno.ENOENT):
        meta.getattr(b)
    assert entry(meta, b_parent, b"b") == src
    assert meta.getattr(src).parent == b_parent
    assert nlink(meta, a) == 2 and nlink(meta, b_parent) == 3
    assert meta.lookup(src, b"..")[0] == b_parent
    assert meta.volume_stats()[0] == 4


def test_rename_dir_within_one_parent_over_empty_dir(meta):
    mkdir(meta, b"a")
    mkdir(meta, b"b")
    rename(meta, (ROOT, b"a"), (ROOT, b"b"))
    assert names(meta) == [b"b"] and nlink(meta, ROOT) == 3


def test_rename_onto_non_empty_dir_is_enotempty(meta):
    mkdir(meta, b"a")
    b = mkdir(meta, b"b")
    mkfile(meta, b"inside", parent=b)
    with fs_error(errno.ENOTEMPTY):
        rename(meta, (ROOT, b"a"), (ROOT, b"b"))
    assert names(meta) == [b"a", b"b"] and names(meta, b) == [b"inside"]


def test_rename_type_mismatch(meta):
    mkdir(meta, b"d")
    mkfile(meta, b"f")
    with fs_error(errno.EISDIR):
        rename(meta, (ROOT, b"f"), (ROOT, b"d"))
    with fs_error(errno.ENOTDIR):
        rename(meta, (ROOT, b"d"), (ROOT, b"f"))
    assert names(meta) == [b"d", b"f"]


def test_rename_dir_into_its_own_subtree_is_einval(meta):
    a = mkdir(meta, b"a")
    b = mkdir(meta, b"b", parent=a)
    c = mkdir(meta, b"c", parent=b)
    with fs_error(errno.EINVAL):
        rename(meta, (ROOT, b"a"), (c, b"a"))
    with fs_error(errno.EINVAL):
        rename(meta, (ROOT, b"a"), (a, b"self"))
    assert names(meta) == [b"a"] and meta.getattr(a).parent == ROOT


def test_rename_missing_source_and_bad_target_parent(meta):
    f = mkfile(meta, b"f")
    with fs_error(errno.ENOENT):
        rename(meta, (ROOT, b"nope"), (ROOT, b"x"))
    with fs_error(errno.ENOTDIR):
        rename(meta, (ROOT, b"f"), (f, b"x"))


def test_rename_noreplace(meta):
    f = mkfile(meta, b"f")
    g = mkfile(meta, b"g")
    with fs_error(errno.EEXIST):
        rename(meta, (ROOT, b"f"), (ROOT, b"g"), RENAME_NOREPLACE)
    assert entry(meta, ROOT, b"f") == f and entry(meta, ROOT, b"g") == g
    rename(meta, (ROOT, b"f"), (ROOT, b"h"), RENAME_NOREPLACE)
    assert names(meta) == [b"g", b"h"]


def test_rename_exchange_files_across_parents(meta):
    p1, p2 = mkdir(meta, b"p1"), mkdir(meta, b"p2")
    a = mkfile(meta, b"a", parent=p1)
    b = mkfile(meta, b"b", parent=p2)
    rename(meta, (p1, b"a"), (p2, b"b"), RENAME_EXCHANGE)
    assert entry(meta, p1, b"a") == b and entry(meta, p2, b"b") == a
    assert nlink(meta, a) == nlink(meta, b) == 1
    assert nlink(meta, p1) == nlink(meta, p2) == 2


def test_rename_exchange_dir_and_dir_across_parents(meta):
    p1, p2 = mkdir(meta, b"p1"), mkdir(meta, b"p2")
    a = mkdir(meta, b"a", parent=p1)
    b = mkdir(meta, b"b", parent=p2)
    mkfile(meta, b"in_a", parent=a)
    rename(meta, (p1, b"a"), (p2, b"b"), RENAME_EXCHANGE)
    assert entry(meta, p1, b"a") == b and entry(meta, p2, b"b") == a
    assert meta.getattr(a).parent == p2 and meta.getattr(b).parent == p1
    assert meta.lookup(a, b"..")[0] == p2 and meta.lookup(b, b"..")[0] == p1
    assert nlink(meta, p1) == nlink(meta, p2) == 3
    assert names(meta, a) == [b"in_a"]


def test_rename_exchange_dir_and_file_across_parents(meta):
    p1, p2 = mkdir(meta, b"p1"), mkdir(meta, b"p2")
    d = mkdir(meta, b"d", parent=p1)
    f = mkfile(meta, b"f", parent=p2)
    rename(meta, (p1, b"d"), (p2, b"f"), RENAME_EXCHANGE)
    assert entry(meta, p1, b"d") == f and entry(meta, p2, b"f") == d
    assert meta.getattr(d).parent == p2
    assert nlink(meta, p1) == 2 and nlink(meta, p2) == 3


def test_rename_exchange_needs_both(meta):
    mkfile(meta, b"a")
    with fs_error(errno.ENOENT):
        rename(meta, (ROOT, b"a"), (ROOT, b"missing"), RENAME_EXCHANGE)
    assert names(meta) == [b"a"]


def test_rename_exchange_into_own_subtree_is_einval(meta):
    a = mkdir(meta, b"a")
    sub = mkdir(meta, b"sub", parent=a)
    with fs_error(errno.EINVAL):
        rename(meta, (ROOT, b"a"), (a, b"sub"), RENAME_EXCHANGE)
    assert entry(meta, ROOT, b"a") == a and entry(meta, a, b"sub") == sub


def test_rename_hard_link_onto_twin_is_a_noop(meta):
    f = mkfile(meta, b"f")
    meta.link(f, ROOT, b"g")
    rename(meta, (ROOT, b"f"), (ROOT, b"g"))
    assert names(meta) == [b"f", b"g"] and nlink(meta, f) == 2
    rename(meta, (ROOT, b"f"), (ROOT, b"f"))
    assert names(meta) == [b"f", b"g"] and nlink(meta, f) == 2


# -- readdir -------------------------------------------------------------------


def test_readdir_order_and_resume(meta):
    d = mkdir(meta, b"d")
    wanted = sorted(b"n%03d" % i for i in range(40)) + [b"\xffhigh"]
    inos = {n: mkfile(meta, n, parent=d) for n in reversed(wanted)}
    listing = list(meta.readdir(d))
    assert listing == [(n, inos[n]) for n in wanted]
    assert names(meta) == [b"d"]
    resumed = [n for n, _ in meta.readdir(d, after=b"n019")]
    assert resumed == wanted[20:]
    assert [n for n, _ in meta.readdir(d, after=b"n0195")] == wanted[20:]
    assert list(meta.readdir(d, after=b"\xffhigh")) == []


# -- attributes ----------------------------------------------------------------


def test_setattr_moves_ctime(meta):
    f = mkfile(meta, b"f")
    before = meta.getattr(f)
    node = meta.setattr(f, mode=FILE & ~0o777 | 0o600, uid=7, gid=8, mtime_ns=1234, atime_ns=99)
    got = meta.getattr(f)
    assert got == node
    assert (stat.S_IMODE(got.mode), got.uid, got.gid, got.mtime_ns, got.atime_ns) == (0o600, 7, 8, 1234, 99)
    assert got.ctime_ns > before.ctime_ns


def test_set_atime_leaves_ctime(meta):
    f = mkfile(meta, b"f")
    before = meta.getattr(f)
    meta.set_atime(f, before.atime_ns + 5_000_000_000)
    got = meta.getattr(f)
    assert got.atime_ns == before.atime_ns + 5_000_000_000
    assert (got.ctime_ns, got.mtime_ns) == (before.ctime_ns, before.mtime_ns)


def test_setattr_missing_is_enoent(meta):
    with fs_error(errno.ENOENT):
        meta.setattr(31337, uid=1)


# -- xattrs ----------------------------------------------------------------------


def test_xattrs(meta):
    f = mkfile(meta, b"f")
    g = mkfile(meta, b"g")
    with fs_error(errno.ENODATA):
        meta.get_xattr(f, b"user.a")
    ctime = meta.getattr(f).ctime_ns
    meta.set_xattr(f, b"user.b", b"2")
    meta.set_xattr(f, b"user.a", b"1")
    meta.set_xattr(f, b"user.a", b"one")
    meta.set_xattr(g, b"user.other", b"x")
    assert meta.getattr(f).ctime_ns > ctime
    assert meta.get_xattr(f, b"user.a") == b"one"
    assert meta.list_xattrs(f) == [b"user.a", b"user.b"]
    meta.remove_xattr(f, b"user.a")
    assert meta.list_xattrs(f) == [b"user.b"]
    with fs_error(errno.ENODATA):
        meta.remove_xattr(f, b"user.a")
    with fs_error(errno.ENODATA):
        meta.get_xattr(f, b"user.a")
    assert meta.list_xattrs(g) == [b"user.other"]


def test_xattr_limits(meta):
    f = mkfile(meta, b"f")
    with fs_error(errno.ERANGE):
        meta.set_xattr(f, b"u" * 256, b"")
    with fs_error(errno.E2BIG):
        meta.set_xattr(f, b"user.big", b"v" * 65537)
    meta.set_xattr(f, b"user.max", b"v" * 65536)
    assert len(meta.get_xattr(f, b"user.max")) == 65536


def test_xattr_on_missing_inode_is_enoent(meta):
    with fs_error(errno.ENOENT):
        meta.set_xattr(55555, b"user.a", b"1")


# -- block map -------------------------------------------------------------------


def test_commit_blocks_sets_size_alloc_usage_and_queues_uploads(meta):
    f = mkfile(meta, b"f")
    node = meta.commit_blocks(f, {0: ref(1, BS), 1: ref(2, 100)}, BS + 100, mtime_ns=777)
    got = meta.getattr(f)
    assert got == node
    assert (got.size, got.alloc, got.mtime_ns) == (BS + 100, BS + 100, 777)
    assert meta.all_block_refs(f) == {0: ref(1, BS), 1: ref(2, 100)}
    assert meta.block_refs(f, [1, 5]) == {1: ref(2, 100)}
    assert sorted(meta.pending_uploads()) == [1, 2]
    assert meta.volume_stats() == (2, BS + 100)


def test_commit_blocks_without_mtime_uses_now(meta):
    f = mkfile(meta, b"f")
    before = meta.getattr(f)
    meta.commit_blocks(f, {0: ref(1)}, 1000)
    got = meta.getattr(f)
    assert got.mtime_ns == got.ctime_ns >= before.mtime_ns


def test_commit_blocks_replaces_refs_and_retires_old_blocks(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {0: ref(1, BS), 1: ref(2, 500)}, BS + 500)
    meta.uploads_done([1])
    meta.commit_blocks(f, {1: ref(3, 800)}, BS + 800)
    assert meta.all_block_refs(f) == {0: ref(1, BS), 1: ref(3, 800)}
    assert meta.getattr(f).alloc == BS + 800
    assert meta.volume_stats()[1] == BS + 800
    assert meta.garbage_due(now_ns=FAR_FUTURE) == [2]
    assert meta.garbage_due() == [], "retired blocks wait out their grace period"
    assert list(meta.pending_uploads()) == [3], "the pending upload of a retired block is dropped"
    meta.garbage_done([2])
    assert meta.garbage_due(now_ns=FAR_FUTURE) == []


def test_pending_uploads_and_uploads_done(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {i: ref(100 + i, 10) for i in range(10)}, 10 * BS)
    assert list(meta.pending_uploads()) == list(range(100, 110))
    assert meta.is_pending(100) and not meta.is_pending(99)
    meta.uploads_done(list(range(100, 105)))
    assert list(meta.pending_uploads()) == list(range(105, 110))
    assert not meta.is_pending(100) and meta.is_pending(105)
    meta.uploads_done([])


def test_truncate_down_without_cut(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {i: ref(10 + i, BS) for i in range(4)}, 4 * BS)
    meta.truncate(f, 2 * BS, None)
    got = meta.getattr(f)
    assert (got.size, got.alloc) == (2 * BS, 2 * BS)
    assert sorted(meta.all_block_refs(f)) == [0, 1]
    assert sorted(meta.garbage_due(now_ns=FAR_FUTURE)) == [12, 13]
    assert sorted(meta.pending_uploads()) == [10, 11]
    assert meta.volume_stats()[1] == 2 * BS


def test_truncate_with_cut_block(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {i: ref(10 + i, BS) for i in range(3)}, 3 * BS)
    node = meta.truncate(f, BS + 100, (1, ref(50, 100)))
    assert meta.getattr(f) == node
    assert (node.size, node.alloc) == (BS + 100, BS + 100)
    assert meta.all_block_refs(f) == {0: ref(10, BS), 1: ref(50, 100)}
    assert sorted(meta.garbage_due(now_ns=FAR_FUTURE)) == [11, 12]
    assert sorted(meta.pending_uploads()) == [10, 50]
    assert meta.volume_stats()[1] == BS + 100


def test_truncate_extend_and_to_zero(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {0: ref(1, 300)}, 300)
    before = meta.getattr(f)
    meta.truncate(f, 10 * BS, None)
    got = meta.getattr(f)
    assert (got.size, got.alloc) == (10 * BS, 300)
    assert got.mtime_ns >= before.mtime_ns
    meta.truncate(f, 0, None)
    assert (meta.getattr(f).size, meta.getattr(f).alloc) == (0, 0)
    assert meta.all_block_refs(f) == {} and meta.volume_stats() == (2, 0)


def test_volume_stats_after_a_sequence(meta):
    d = mkdir(meta, b"d")
    a = mkfile(meta, b"a", parent=d)
    b = mkfile(meta, b"b", parent=d)
    meta.create(d, b"l", stat.S_IFLNK | 0o777, 0, 0, target=b"a")
    meta.commit_blocks(a, {0: ref(1, BS), 1: ref(2, 10)}, BS + 10)
    meta.commit_blocks(b, {0: ref(3, 20)}, 20)
    assert meta.volume_stats() == (5, BS + 30)
    meta.link(a, ROOT, b"a2")
    meta.unlink(d, b"a", never_open)
    assert meta.volume_stats() == (5, BS + 30)
    meta.truncate(a, 5, (0, ref(4, 5)))
    assert meta.volume_stats() == (5, 25)
    meta.unlink(ROOT, b"a2", never_open)
    rename(meta, (d, b"l"), (d, b"b"))
    assert meta.volume_stats() == (3, 0)
    meta.unlink(d, b"b", never_open)
    meta.rmdir(ROOT, b"d")
    assert meta.volume_stats() == (1, 0)


# -- pins ------------------------------------------------------------------------


def test_pins_are_kept_changed_and_cleared(meta):
    f, g = mkfile(meta, b"f"), mkfile(meta, b"g")
    assert meta.pins() == {}
    meta.set_pin(f, "nvme")
    meta.set_pin(g, "ram")
    meta.set_pin(f, "ram")
    assert meta.pins() == {f: "ram", g: "ram"}
    meta.clear_pin(g)
    meta.clear_pin(g)  # clearing what is not pinned is no error
    assert meta.pins() == {f: "ram"}


def test_freeing_a_file_drops_its_pin(meta):
    f = mkfile(meta, b"f")
    o = mkfile(meta, b"o")
    meta.set_pin(f, "nvme")
    meta.set_pin(o, "nvme")
    meta.unlink(ROOT, b"f", never_open)
    meta.unlink(ROOT, b"o", always_open)
    assert meta.pins() == {o: "nvme"}, "an orphan keeps its pin until it is reclaimed"
    meta.reclaim(o)
    assert meta.pins() == {}


# -- queues ---------------------------------------------------------------------


def test_garbage_due_honours_its_limit_and_the_grace_period(meta):
    f = mkfile(meta, b"f")
    meta.commit_blocks(f, {i: ref(100 + i, 10) for i in range(8)}, 8 * BS)
    meta.truncate(f, 0, None)
    assert meta.garbage_due(now_ns=FAR_FUTURE) == list(range(100, 108))
    assert meta.garbage_due(limit=3, now_ns=FAR_FUTURE) == [100, 101, 102]
    assert meta.garbage_due(now_ns=meta.getattr(f).ctime_ns) == []
    assert meta.garbage_due(now_ns=meta.getattr(f).ctime_ns + meta.garbage_grace_ns) == list(range(100, 108))
    meta.garbage_done([100, 105, 999])
    assert meta.garbage_due(now_ns=FAR_FUTURE) == [101, 102, 103, 104, 106, 107]


# -- ids -------------------------------------------------------------------------


def test_inode_numbers_and_block_ids_are_distinct(meta):
    inos = {mkfile(meta, b"f%d" % i) for i in range(100)}
    assert len(inos) == 100 and min(inos) > ROOT
    blocks = [meta.block_ids.next() for _ in range(5000)]
    assert len(set(blocks)) == 5000 and min(blocks) >= 1


# -- reopen --------------------------------------------------------------------


def test_reopen_preserves_everything(store, meta):
    d = mkdir(meta, b"d", mode=0o2750, gid=44)
    f = mkfile(meta, b"f", parent=d, uid=5)
    meta.link(f, ROOT, b"f2")
    sym, _ = meta.create(d, b"s", stat.S_IFLNK | 0o777, 0, 0, target=b"../f2")
    meta.set_xattr(f, b"user.k", b"v")
    meta.commit_blocks(f, {0: ref(1, BS), 1: ref(2, 7)}, BS + 7)
    meta.commit_blocks(f, {1: ref(3, 9)}, BS + 9)
    o = mkfile(meta, b"open")
    meta.unlink(ROOT, b"open", always_open)
    state = {
        "attrs": {ino: meta.getattr(ino) for ino in (ROOT, d, f, sym, o)},
        "root": list(meta.readdir(ROOT)),
        "d": list(meta.readdir(d)),
        "stats": meta.volume_stats(),
        "uploads": sorted(meta.pending_uploads()),
        "garbage": meta.garbage_due(now_ns=FAR_FUTURE),
        "uuid": meta.volume["uuid"],
    }
    meta = MetaEngine(store.reopen(), BS)
    assert {ino: meta.getattr(ino) for ino in state["attrs"]} == state["attrs"]
    assert list(meta.readdir(ROOT)) == state["root"]
    assert list(meta.readdir(d)) == state["d"]
    assert meta.volume_stats() == state["stats"]
    assert sorted(meta.pending_uploads()) == state["uploads"] == [1, 3]
    assert meta.garbage_due(now_ns=FAR_FUTURE) == state["garbage"] == [2]
    assert meta.volume["uuid"] == state["uuid"]
    assert meta.readlink(sym) == b"../f2"
    assert meta.get_xattr(f, b"user.k") == b"v"
    assert meta.all_block_refs(f) == {0: ref(1, BS), 1: ref(3, 9)}
    assert meta.orphans() == [o]


def test_block_size_is_fixed_at_format(store, meta):
    assert MetaEngine(store.reopen(), 4 * BS).block_size == BS


def test_ids_are_never_handed_out_twice_across_reopen(store, meta):
    seen_inos, seen_blocks = {ROOT}, set()
    for round_ in range(3):
        if round_:
            meta = MetaEngine(store.reopen(), BS)
        for i in range(20):
            ino = mkfile(meta, b"r%d-%d" % (round_, i))
            assert ino not in seen_inos
            seen_inos.add(ino)
            block_id = meta.block_ids.next()
            assert block_id not in seen_blocks
            seen_blocks.add(block_id)
    assert len(seen_inos) == 61 and len(seen_blocks) == 60
