"""What the kernel asks the mount for: a file opened only to be read costs an open and a
release, no flush; a directory listed again while unchanged is served from the kernel's
cache, and a listing after a change shows it; entries past a listing's first
`listing_attributes` carry their type and inode number but cost a lookup when stat'ed.
Counted with the mount's own FUSE totals."""

import os
import stat
import time

import pytest

from aifs.config import load_config
from aifs.control.client import ControlClient
from aifs.meta import keys
from aifs.meta.engines import open_kv
from aifs.meta.kv import Batch

SETTLE_S = 10.0  # a bound for releases, which the kernel sends after close() has returned


def requests(path) -> dict[str, int]:
    totals = ControlClient.for_path(path).call("stats")["fuse"]
    return {op: int(figures["count"]) for op, figures in totals.items()}


def grown(before: dict[str, int], path, op: str, at_least: int = 0) -> int:
    """How many more `op` requests the mount has served, once at least `at_least` more came."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        more = requests(path).get(op, 0) - before.get(op, 0)
        if more >= at_least or time.monotonic() > deadline:
            return more
        time.sleep(0.01)


@pytest.fixture
def mounted(vol, d):
    if not vol.is_mount:
        pytest.skip("counts the requests of an aifs mount")
    return d


def test_a_file_opened_to_read_sends_no_flush_at_close(mounted):
    path = mounted / "sample"
    path.write_bytes(os.urandom(16384))
    before = requests(mounted)
    for _ in range(20):
        with open(path, "rb") as f:
            assert len(f.read()) == 16384
    assert grown(before, mounted, "release", at_least=20) == 20
    assert grown(before, mounted, "open") == 20
    assert grown(before, mounted, "flush") == 0, "a read-only close sends no FLUSH"
    before = requests(mounted)
    with open(path, "r+b") as f:
        f.write(b"x")
    assert grown(before, mounted, "flush", at_least=1) == 1, "a writer's close still seals what it wrote"
    assert path.read_bytes()[:1] == b"x"


def test_an_unchanged_listing_comes_from_the_kernel_and_a_change_shows(mounted):
    names = {f"f{i:04d}" for i in range(300)}
    for name in names:
        (mounted / name).write_bytes(b"")
    assert set(os.listdir(mounted)) == names
    before = requests(mounted)
    for _ in range(5):
        assert set(os.listdir(mounted)) == names
    assert grown(before, mounted, "readdir") == 0, "listings of an unchanged directory are the kernel's"
    (mounted / "added").write_bytes(b"")
    os.unlink(mounted / "f0000")
    names = names - {"f0000"} | {"added"}
    assert set(os.listdir(mounted)) == names
    os.rename(mounted / "f0001", mounted / "renamed")
    assert set(os.listdir(mounted)) == names - {"f0001"} | {"renamed"}


ATTRIBUTED = 8


def mixed_tree(root) -> None:
    """Files, directories, symbolic links, a FIFO and a hard link: 40 entries of every type."""
    for i in range(10):
        (root / f"file{i}").write_bytes(b"x" * i)
        (root / f"dir{i}").mkdir()
        os.symlink(f"file{i}", root / f"link{i}")
    os.mkfifo(root / "fifo")
    os.link(root / "file0", root / "hard")
    for i in range(8):
        (root / f"zz{i}").write_bytes(b"")


def scanned(root) -> dict[str, tuple[int, str]]:
    """name: (inode number, type) as a listing reports them, without a stat."""
    kinds = {}
    with os.scandir(root) as entries:
        for entry in entries:
            kind = "link" if entry.is_symlink() else "dir" if entry.is_dir(follow_symlinks=False) \
                else "file" if entry.is_file(follow_symlinks=False) else "other"
            kinds[entry.name] = (entry.inode(), kind)
    return kinds


def stat_kind(mode: int) -> str:
    return {stat.S_IFLNK: "link", stat.S_IFDIR: "dir", stat.S_IFREG: "file"}.get(stat.S_IFMT(mode), "other")


@pytest.fixture(scope="module")
def few_attributes(make_volume):
    volume = make_volume("few-attributes")
    if not volume.is_mount:
        pytest.skip("counts the requests of an aifs mount")
    volume.config.write_text(volume.config.read_text() + f"\n[fuse]\nlisting_attributes = {ATTRIBUTED}\n")
    volume.remount()
    return volume


def test_entries_past_the_attributed_ones_carry_type_and_inode_and_cost_a_lookup(few_attributes, tmp_path):
    root = few_attributes.path / "mixed"
    root.mkdir()
    mixed_tree(root)
    mixed_tree(tmp_path)
    few_attributes.remount()  # the kernel forgets the entries it learnt while they were made
    before = requests(root)
    listed = scanned(root)
    assert grown(before, root, "lookup") == 0, "the types come with the listing, not from stat"
    assert {name: kind for name, (_, kind) in listed.items()} == \
        {name: kind for name, (_, kind) in scanned(tmp_path).items()}
    stats = {name: os.lstat(root / name) for name in listed}
    assert {name: (st.st_ino, stat_kind(st.st_mode)) for name, st in stats.items()} == listed
    assert grown(before, root, "lookup") == len(listed) - ATTRIBUTED


def test_entries_that_record_no_type_are_listed_with_it(few_attributes, tmp_path):
    """Entries written before entries recorded their inode's type: the listing reads the inodes."""
    root = few_attributes.path / "older"
    root.mkdir()
    mixed_tree(root)
    mixed_tree(tmp_path)
    parent = os.stat(root).st_ino
    few_attributes.umount()
    kv = open_kv(load_config(few_attributes.config))
    try:
        values = dict(kv.scan(keys.dentry_prefix(parent)))
        assert all(keys.read_entry(value)[1] is not None for value in values.values())
        batch = Batch()
        for key, value in values.items():
            batch.put(key, value[:8])
        kv.commit(batch)
    finally:
        kv.close()
    few_attributes.mount()
    assert {name: kind for name, (_, kind) in scanned(root).items()} == \
        {name: kind for name, (_, kind) in scanned(tmp_path).items()}
