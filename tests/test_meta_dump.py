"""`aifs meta dump` and `aifs meta load`: a volume moves between metadata engines.

Through the command line and the mount: a volume with files, directories, symbolic and hard
links, extended attributes and data in the object store is dumped from RocksDB, loaded into
another engine (RocksDB with another shard count, Redis), mounted there, and reads back the
same; a dump of the loaded engine is the same bytes. Dumps cut short or damaged are refused
without writing anything; an engine that holds anything is refused.

In-process: every prefix and every damaged byte of a dump is refused with DumpError, a load
that fails part way leaves the engine empty (or says what is left), and the list of counters
covers every counter the namespace moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest
from cli_helpers import aifs, aifs_ok, refused
from conftest import CONFIG_TEMPLATE, REPO, Volume
from helpers import describe_tree, make_sample_tree, pattern, write_file
from redisserver import RedisServer, running

from aifs.meta import MetaEngine, contents, keys, load
from aifs.meta.attrs import BlockRef
from aifs.meta.dump import DumpError, verify_dump, write_dump
from aifs.meta.engine import ROOT_INO
from aifs.meta.kv import Batch
from aifs.meta.memory_kv import MemoryKV
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.meta.writestate import MetaWriteFailed

BLOCK = 64 << 10
FILE = 0o100644
DIR = 0o040755
pytestmark = pytest.mark.timeout_s(300)


# -- the command line ---------------------------------------------------------------------


def config_text(state_dir: Path, objects: Path, meta: str = "") -> str:
    """tests/conftest.py's volume, its object store at `objects` (shared by the volumes of a
    test, so a volume moved to another engine finds its data), `meta` in its [meta] table."""
    text = CONFIG_TEMPLATE.format(state_dir=state_dir)
    text = text.replace('kind = "objstore"\n', f'kind = "objstore"\npath = "{objects}"\n')
    return text + (f"\n[meta]\n{meta}\n" if meta else "")


@pytest.fixture(scope="module")
def volumes(tmp_path_factory) -> Iterator[Callable[..., Volume]]:
    """Factory of unmounted volumes sharing one object store; `meta` is their [meta] table."""
    base = tmp_path_factory.mktemp("volumes")
    objects = base / "objects"
    objects.mkdir()
    made: list[Volume] = []

    def make(name: str, meta: str = "") -> Volume:
        volume = Volume(base / name)
        volume.config.write_text(config_text(volume.state_dir, objects, meta))
        made.append(volume)
        return volume

    yield make
    for volume in made:
        volume.close()


def fill(root: Path) -> None:
    """Every kind of entry, plus names and attributes that test the key order."""
    make_sample_tree(root / "tree")
    many = root / "many"
    many.mkdir()
    for i in range(300):
        write_file(many / f"f{i:03d}\xe9", pattern(i, i * 37))
    os.setxattr(many, "user.big", pattern("xattr", 4000))
    os.link(many / "f007\xe9", root / "tree" / "second name")
    os.symlink("many/f001\xe9", root / "to_many")


@dataclass
class Source:
    """A volume filled through the mount, unmounted, and its dump."""

    volume: Volume
    tree: dict
    dump: Path


@pytest.fixture(scope="module")
def source(volumes, tmp_path_factory) -> Source:
    volume = volumes("source")
    volume.mount()
    fill(volume.path)
    aifs_ok("sync", "--wait", volume.path)
    tree = describe_tree(volume.path)
    refused(aifs("meta", "dump", "-c", volume.config, tmp_path_factory.mktemp("x") / "d"),
            "mounted at", "unmount it first")
    volume.umount()
    dump = tmp_path_factory.mktemp("dumps") / "source.dump"
    done = aifs_ok("meta", "dump", "-c", volume.config, dump)
    assert f"to {dump}: " in done.stdout and "waiting for upload" not in done.stderr
    return Source(volume, tree, dump)


def moved_and_mounted(source: Source, target: Volume, tmp_path: Path) -> None:
    """Load the source's dump into `target`, check a dump of it is the same, mount it and
    check the tree reads back the same."""
    loaded = aifs_ok("meta", "load", "-c", target.config, source.dump)
    assert "loaded volume" in loaded.stdout
    again = tmp_path / "again.dump"
    aifs_ok("meta", "dump", "-c", target.config, again)
    assert again.read_bytes() == source.dump.read_bytes()
    target.mount()
    try:
        assert describe_tree(target.path) == source.tree
    finally:
        target.umount()


def test_a_volume_moves_to_rocksdb_with_other_shards_and_reads_back_the_same(source, volumes, tmp_path):
    moved_and_mounted(source, volumes("three-shards", meta="shards = 3"), tmp_path)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory) -> Iterator[RedisServer]:
    with running(tmp_path_factory.mktemp("redis")) as server:
        yield server


def test_a_volume_moves_to_redis_and_reads_back_the_same(source, volumes, redis_server, tmp_path):
    redis_server.flush()
    target = volumes("redis", meta=f'url = "{redis_server.url}"')
    moved_and_mounted(source, target, tmp_path)
    target.mount()
    try:
        while_mounted = aifs_ok("meta", "dump", "-c", target.config, tmp_path / "while-mounted.dump")
        assert "point-in-time copy only if no mount writes" in while_mounted.stderr
        (target.path / "after the dump").write_bytes(b"x")
    finally:
        target.umount()
    reloaded = volumes("from-redis")
    aifs_ok("meta", "load", "-c", reloaded.config, tmp_path / "while-mounted.dump")
    reloaded.mount()
    try:
        assert describe_tree(reloaded.path) == source.tree
    finally:
        reloaded.umount()


def test_a_dump_to_standard_output_is_the_same_as_to_a_file(source):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    streamed = subprocess.run([sys.executable, "-m", "aifs", "meta", "dump", "-c", str(source.volume.config)],
                              capture_output=True, timeout=120, cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == source.dump.read_bytes()
    assert b"dumped volume" in streamed.stderr


def test_a_dump_never_overwrites_a_file(source):
    refused(aifs("meta", "dump", "-c", source.volume.config, source.dump), "exists", "never overwrites")


def cut_and_damaged(data: bytes) -> dict[str, tuple[bytes, str]]:
    """Broken copies of a dump, each with what the refusal must say."""
    middle = len(data) // 2
    return {
        "cut-in-the-middle": (data[:middle], "cut short"),
        "cut-in-the-trailer": (data[:-5], "cut short"),
        "empty": (b"", "cut short"),
        "one-byte-changed": (data[:middle] + bytes([data[middle] ^ 0x55]) + data[middle + 1:], ""),
        "bytes-after-the-trailer": (data + b"\x00", "data follows its trailer"),
        "not-a-dump": (b"hello, this is not a dump", "is not an aifs metadata dump"),
    }


def test_a_cut_or_damaged_dump_is_refused_and_nothing_is_loaded(source, volumes, tmp_path):
    target = volumes("refuses-damage")
    for name, (data, says) in cut_and_damaged(source.dump.read_bytes()).items():
        broken = tmp_path / name
        broken.write_bytes(data)
        refused(aifs("meta", "load", "-c", target.config, broken), "refusing the dump", says, "nothing was loaded")
    aifs_ok("meta", "load", "-c", target.config, source.dump)  # the engine was left empty


def test_a_load_into_an_engine_that_holds_a_volume_is_refused(source, tmp_path):
    cp = aifs("meta", "load", "-c", source.volume.config, source.dump)
    refused(cp, "holds volume", "a load needs an empty engine", str(source.volume.state_dir / "meta"))
    unchanged = tmp_path / "unchanged.dump"
    aifs_ok("meta", "dump", "-c", source.volume.config, unchanged)
    assert unchanged.read_bytes() == source.dump.read_bytes()


def test_a_dump_of_no_volume_is_refused(volumes, tmp_path):
    empty = volumes("no-volume")
    refused(aifs("meta", "dump", "-c", empty.config, tmp_path / "d"), "holds no metadata")
    assert not (tmp_path / "d").exists()


# -- in-process: the dump format and the load ---------------------------------------------------


def small_volume() -> MemoryKV:
    """A volume with an entry of most tags, made through MetaEngine."""
    kv = MemoryKV()
    meta = MetaEngine(kv, BLOCK)
    d, _ = meta.create(ROOT_INO, b"d", DIR, 0, 0)
    f, _ = meta.create(d, b"f", FILE, 0, 0)
    meta.create(ROOT_INO, b"l", 0o120777, 0, 0, target=b"d/f")
    meta.link(f, ROOT_INO, b"f2")
    meta.set_xattr(f, b"user.x", b"y")
    meta.commit_blocks(f, {0: BlockRef(meta.block_ids.next(), 0, 10, 1)}, 10)
    meta.set_pin(f, "ram")
    return kv


def dumped(kv) -> bytes:
    out = BytesIO()
    write_dump(kv, out)
    return out.getvalue()


def verify(data: bytes):
    return verify_dump(BytesIO(data), "the dump")


def test_every_cut_of_a_dump_is_refused():
    data = dumped(small_volume())
    assert verify(data).trailer.records > 0
    for end in range(len(data)):
        with pytest.raises(DumpError, match="cut short"):
            verify(data[:end])


@pytest.mark.parametrize("flip", [0x01, 0x80, 0xFF])
def test_every_damaged_byte_of_a_dump_is_refused(flip):
    data = dumped(small_volume())
    for at in range(len(data)):
        with pytest.raises(DumpError):
            verify(data[:at] + bytes([data[at] ^ flip]) + data[at + 1:])


def test_a_load_restores_every_key_and_counter_exactly():
    source = small_volume()
    target = MemoryKV()
    load.load_dump(target, BytesIO(dumped(source)), "the dump")
    assert list(contents.plain_items(target)) == list(contents.plain_items(source))
    assert contents.counters(target) == contents.counters(source)
    assert contents.counters(target)["next_ino"] > 0


class FailingKV(MemoryKV):
    """Fails the commits that `fails` picks by their number (0 first), as a full disk would."""

    def __init__(self, fails: Callable[[int], bool]) -> None:
        super().__init__()
        self.fails = fails
        self.commits = 0

    def commit(self, batch: Batch) -> None:
        self.commits += 1
        if self.fails(self.commits - 1):
            raise MetaWriteFailed(28, "the metadata disk is full")
        super().commit(batch)


def test_a_load_that_fails_part_way_empties_the_engine(monkeypatch):
    monkeypatch.setattr(load, "BATCH_KEYS", 2)
    kv = FailingKV(lambda n: n == 3)
    with pytest.raises(load.LoadFailed, match="disk is full") as failed:
        load.load_dump(kv, BytesIO(dumped(small_volume())), "the dump")
    assert failed.value.remaining == 0
    assert contents.is_empty(kv)


def test_a_load_that_cannot_be_undone_says_how_much_is_left(monkeypatch):
    monkeypatch.setattr(load, "BATCH_KEYS", 2)
    kv = FailingKV(lambda n: n >= 3)
    with pytest.raises(load.LoadFailed) as failed:
        load.load_dump(kv, BytesIO(dumped(small_volume())), "the dump")
    assert failed.value.remaining == 6  # three batches of two keys went in
    with pytest.raises(load.NotEmpty, match="6 keys but no volume record"):
        load.check_empty(kv)


def test_every_counter_the_namespace_moves_is_listed():
    kv = small_volume()
    assert set(kv._counters) <= set(contents.COUNTER_KEYS)
    assert set(kv._counters) >= {keys.counter(b"next_ino"), keys.counter(b"next_block")}


def test_rocksdb_scans_a_tag_in_key_order_across_shards(tmp_path):
    kv = ShardedRocksKV(tmp_path, 4)
    try:
        batch = Batch()
        for ino in range(1, 200):
            batch.put(keys.inode(ino), b"")
            batch.put(keys.dentry(ino, b"name"), b"")
        kv.commit(batch)
        for tag in (keys.INODE, keys.DENTRY):
            scanned = [key for key, _ in kv.scan(tag)]
            assert scanned == sorted(scanned) and len(scanned) == 199
    finally:
        kv.close()
