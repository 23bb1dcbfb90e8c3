"""aifs fsck on volumes built straight through MetaEngine and the tier classes (no FUSE).

A clean volume passes; each kind of damage, written as raw keys or object files, is
reported without changing anything, repaired by --repair where it can be, and a second
run is clean. Lost data stays reported.
"""

import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from aifs.cli.fsck_cmd import fsck as fsck_cli
from aifs.config import Config, load_config
from aifs.fsck import Finding, run_fsck
from aifs.meta import MetaEngine, keys, usage
from aifs.meta.attrs import BlockRef, Inode
from aifs.meta.engine import ROOT_INO
from aifs.meta.kv import Batch
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.tiers.checksum import checksum
from aifs.tiers.nvme import NvmeTier
from aifs.tiers.objstore import LocalObjectStore
from aifs.tiers.protocol import object_name
from aifs.vfs.statedir import VolumeLock

BLOCK = 64 << 10
FILE = stat.S_IFREG | 0o644
DIR = stat.S_IFDIR | 0o755
LINK = stat.S_IFLNK | 0o777
NO_INODE = 999_999
STRAY_OBJECT = 0xABCDEF
CONFIG = """\
[volume]
state_dir = "{state_dir}"
block_size = "64KiB"

[meta]
shards = 4
"""


@dataclass
class Vol:
    """A small volume: /data/big (2.5 blocks, uploaded, block 0 overwritten once),
    /data/sub/small (one block, still pending upload) also linked as /hardlink, /sym."""

    config_path: Path
    config: Config
    ino: dict[str, int]
    blocks: dict[str, list[int]]

    @property
    def nvme(self) -> Path:
        return self.config.volume.state_dir / "nvme"

    @property
    def cold(self) -> Path:
        return self.config.volume.state_dir / "objects"

    @contextmanager
    def kv(self) -> Iterator[ShardedRocksKV]:
        kv = ShardedRocksKV(self.config.volume.state_dir / "meta", self.config.meta.shards)
        try:
            yield kv
        finally:
            kv.close()

    @contextmanager
    def tiers(self) -> Iterator[tuple[NvmeTier, LocalObjectStore]]:
        nvme = NvmeTier(self.nvme, 1 << 30)
        try:
            yield nvme, LocalObjectStore(self.cold, 1 << 30)
        finally:
            nvme.close()

    @contextmanager
    def meta(self) -> Iterator[MetaEngine]:
        meta = MetaEngine.open(self.config.volume.state_dir / "meta", self.config.meta.shards, BLOCK)
        try:
            yield meta
        finally:
            meta.close()

    def write(self, *puts: tuple[bytes, bytes], deletes: tuple[bytes, ...] = ()) -> None:
        """Damage the metadata: raw puts and deletes in one batch."""
        batch = Batch()
        for key, value in puts:
            batch.put(key, value)
        for key in deletes:
            batch.delete(key)
        with self.kv() as kv:
            kv.commit(batch)

    def inode(self, name: str) -> Inode:
        with self.kv() as kv:
            return Inode.decode(kv.get(keys.inode(self.ino[name])))

    def edit_inode(self, name: str, **fields: int) -> None:
        node = self.inode(name)
        for field, value in fields.items():
            setattr(node, field, value)
        self.write((keys.inode(self.ino[name]), node.encode()))


def stage(meta: MetaEngine, nvme: NvmeTier, ino: int, data: bytes) -> dict[int, BlockRef]:
    """What a write from offset 0 does: new block objects on NVMe, then one commit of refs,
    size and U keys (blocks it replaces go to G)."""
    refs = {}
    for offset in range(0, len(data), BLOCK):
        chunk = data[offset:offset + BLOCK]
        block_id = meta.block_ids.next()
        nvme.put(block_id, chunk, dirty=True)
        refs[offset // BLOCK] = BlockRef(block_id, 0, len(chunk), checksum(chunk))
    meta.commit_blocks(ino, refs, max(meta.getattr(ino).size, len(data)))
    return refs


def _upload(meta: MetaEngine, nvme: NvmeTier, cold: LocalObjectStore, refs: dict[int, BlockRef]) -> None:
    for ref in refs.values():
        cold.put(ref.block_id, nvme.get(ref.block_id))
    meta.uploads_done([ref.block_id for ref in refs.values()])


def _populate(volume: Vol, meta: MetaEngine, nvme: NvmeTier, cold: LocalObjectStore) -> None:
    ino = volume.ino
    ino["data"] = meta.create(ROOT_INO, b"data", DIR, 0, 0)[0]
    ino["sub"] = meta.create(ino["data"], b"sub", DIR, 0, 0)[0]
    ino["big"] = meta.create(ino["data"], b"big", FILE, 0, 0)[0]
    ino["small"] = meta.create(ino["sub"], b"small", FILE, 0, 0)[0]
    ino["sym"] = meta.create(ROOT_INO, b"sym", LINK, 0, 0, target=b"data/big")[0]
    meta.link(ino["small"], ROOT_INO, b"hardlink")
    meta.set_xattr(ino["big"], b"user.tag", b"v")
    _upload(meta, nvme, cold, stage(meta, nvme, ino["big"], os.urandom(BLOCK * 5 // 2)))
    _upload(meta, nvme, cold, stage(meta, nvme, ino["big"], b"x" * BLOCK))  # old block 0 -> G
    stage(meta, nvme, ino["small"], b"small file")
    for name in ("big", "small"):
        volume.blocks[name] = [ref.block_id for ref in meta.all_block_refs(ino[name]).values()]


@pytest.fixture
def volume(tmp_path: Path) -> Vol:
    config_path = tmp_path / "aifs.toml"
    config_path.write_text(CONFIG.format(state_dir=tmp_path / "state"))
    volume = Vol(config_path, load_config(config_path), {"root": ROOT_INO}, {})
    with volume.meta() as meta, volume.tiers() as (nvme, cold):
        _populate(volume, meta, nvme, cold)
    return volume


@dataclass
class Run:
    code: int
    findings: list[dict]
    summary: dict
    stderr: str

    @property
    def kinds(self) -> set[str]:
        return {f["kind"] for f in self.findings}


def fsck(volume: Vol, *args: str) -> Run:
    result = CliRunner().invoke(fsck_cli, ["-c", str(volume.config_path), "--json", *args])
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    if not lines:
        return Run(result.exit_code, [], {}, result.stderr)
    return Run(result.exit_code, lines[:-1], lines[-1]["summary"], result.stderr)


def snapshot(volume: Vol) -> tuple[list, list]:
    """Every metadata key and value, and every object file: what a check must not change."""
    with volume.kv() as kv:
        pairs = sorted(pair for tag in b"DIBXLOCUG" for pair in kv.scan(bytes([tag])))
    objects = sorted((str(p), p.read_bytes()) for root in (volume.nvme, volume.cold)
                     for p in root.rglob("*") if p.is_file())
    return pairs, objects


def object_path(root: Path, block_id: int) -> Path:
    return root / object_name(block_id)


def usage_of(volume: Vol) -> tuple[int, int]:
    with volume.meta() as meta:
        return meta.volume_stats()


# -- clean volume -------------------------------------------------------------------


def test_clean_volume_passes(volume: Vol) -> None:
    run = fsck(volume, "--verify")
    assert (run.code, run.findings) == (0, []), run.findings
    assert run.summary["clean"] is True
    assert run.summary["checked"]["inodes"] == 6
    assert run.summary["checked"]["block refs"] == 4


def test_text_output_is_one_line_per_finding_and_a_summary(volume: Vol) -> None:
    volume.write((keys.dentry(ROOT_INO, b"ghost"), keys.u64(NO_INODE)))
    result = CliRunner().invoke(fsck_cli, ["-c", str(volume.config_path)])
    lines = result.stdout.splitlines()
    assert result.exit_code == 1
    assert len(lines) == 2
    assert lines[0].startswith('dangling-dentry: /ghost (D 1 "ghost") -> inode 999999: ')
    assert lines[0].endswith("[--repair will delete the entry]")
    assert "1 problem(s) found, 0 repaired, 1 remaining (dangling-dentry 1)" in lines[1]


def test_python_api_reports_each_finding_as_it_is_made(volume: Vol) -> None:
    volume.write((keys.upload(STRAY_OBJECT), b""))
    seen: list[Finding] = []
    summary = run_fsck(volume.config, emit=seen.append)
    assert [(f.kind, f.block) for f in seen] == [("stale-upload", STRAY_OBJECT)]
    assert summary.exit_code == 1
    assert run_fsck(volume.config, repair=True).exit_code == 0
    assert run_fsck(volume.config).exit_code == 0


# -- damage that --repair fixes --------------------------------------------------------


def dangling_dentry(volume: Vol) -> None:
    volume.write((keys.dentry(volume.ino["data"], b"ghost"), keys.u64(NO_INODE)))


def stray_dentry(volume: Vol) -> None:
    volume.write((keys.dentry(NO_INODE, b"x"), keys.u64(volume.ino["big"])))


def stray_keys(volume: Vol) -> None:
    ref = BlockRef(STRAY_OBJECT, 0, 10, 0)
    volume.write((keys.block(NO_INODE, 0), ref.encode()), (keys.block(NO_INODE, 1), ref.encode()),
                 (keys.xattr(NO_INODE, b"user.a"), b"v"), (keys.symlink(NO_INODE), b"target"),
                 (keys.pin(NO_INODE), b"ram"))


def bad_pins(volume: Vol) -> None:
    """Pins only a mount's own checks would refuse: of a directory, and to no known tier."""
    volume.write((keys.pin(volume.ino["data"]), b"ram"), (keys.pin(volume.ino["big"]), b"tape"))


def orphan_file(volume: Vol) -> None:
    volume.write(deletes=(keys.dentry(volume.ino["data"], b"big"),))


def leaked_inode(volume: Vol) -> None:
    """A file left with no name and nlink 0, yet not on the orphan list: kept, not freed."""
    orphan_file(volume)
    volume.edit_inode("big", nlink=0)


def orphan_tree(volume: Vol) -> None:
    """/data loses its entry; its subtree goes with it and root's link count is now off by one."""
    volume.write(deletes=(keys.dentry(ROOT_INO, b"data"),))


def directory_loop(volume: Vol) -> None:
    """/data moves into its own child /data/sub: both are cut off, link counts still add up."""
    volume.write((keys.dentry(volume.ino["sub"], b"loop"), keys.u64(volume.ino["data"])),
                 deletes=(keys.dentry(ROOT_INO, b"data"),))
    volume.edit_inode("data", parent=volume.ino["sub"])
    volume.edit_inode("sub", nlink=3)
    volume.edit_inode("root", nlink=2)


def wrong_entry_type(volume: Vol) -> None:
    """An entry that says a regular file is a directory: listings would report it as one."""
    volume.write((keys.dentry(volume.ino["data"], b"big"), keys.entry(volume.ino["big"], DIR)))


def directory_hardlink(volume: Vol) -> None:
    volume.write((keys.dentry(ROOT_INO, b"alias"), keys.u64(volume.ino["sub"])))


def wrong_file_nlink(volume: Vol) -> None:
    volume.edit_inode("small", nlink=7)


def wrong_dir_nlink(volume: Vol) -> None:
    volume.edit_inode("data", nlink=9)


def wrong_parent(volume: Vol) -> None:
    volume.edit_inode("sub", parent=ROOT_INO)


def unlinked_while_open(volume: Vol) -> None:
    """A crash while an unlinked file was still open: on the O list with nlink 0."""
    with volume.meta() as meta:
        meta.unlink(volume.ino["data"], b"big", is_open=lambda ino: True)


def stale_orphan_keys(volume: Vol) -> None:
    """On the orphan list: a file that still has its names, and an inode already freed."""
    volume.write((keys.orphan(volume.ino["small"]), b""), (keys.orphan(NO_INODE), b""))


def unreferenced_objects(volume: Vol) -> None:
    """Staged or uploaded by a write that crashed before its metadata commit."""
    with volume.tiers() as (nvme, cold):
        nvme.put(STRAY_OBJECT, b"staged", dirty=True)
        cold.put(STRAY_OBJECT + 1, b"uploaded")


def stale_upload(volume: Vol) -> None:
    volume.write((keys.upload(STRAY_OBJECT), b""))


def live_garbage(volume: Vol) -> None:
    volume.write((keys.garbage(volume.blocks["big"][1]), msgpack.packb(0)))


def unqueued_upload(volume: Vol) -> None:
    volume.write(deletes=(keys.upload(volume.blocks["small"][0]),))


def wrong_alloc(volume: Vol) -> None:
    volume.edit_inode("big", alloc=volume.inode("big").alloc + 5)


def wrong_usage(volume: Vol) -> None:
    with volume.kv() as kv:
        kv.add(usage.INODES, 99)
        kv.add(usage.BYTES, 1)


REPAIRABLE: dict[str, tuple[Callable[[Vol], None], set[str]]] = {
    "dangling dentry": (dangling_dentry, {"dangling-dentry"}),
    "stray dentry": (stray_dentry, {"stray-dentry"}),
    "keys of a missing inode": (stray_keys, {"stray-block-refs", "stray-xattrs", "stray-symlink", "stray-pin"}),
    "bad pins": (bad_pins, {"bad-pin"}),
    "orphan file": (orphan_file, {"orphan-inode"}),
    "leaked inode": (leaked_inode, {"orphan-inode"}),
    "orphan tree": (orphan_tree, {"orphan-inode", "wrong-nlink"}),
    "directory loop": (directory_loop, {"directory-loop"}),
    "directory hard link": (directory_hardlink, {"directory-hardlink"}),
    "entry type": (wrong_entry_type, {"dentry-type"}),
    "file nlink": (wrong_file_nlink, {"wrong-nlink"}),
    "directory nlink": (wrong_dir_nlink, {"wrong-nlink"}),
    "directory parent": (wrong_parent, {"wrong-parent"}),
    "unlinked while open": (unlinked_while_open, {"unlinked-inode"}),
    "stale orphan keys": (stale_orphan_keys, {"stale-orphan"}),
    "unreferenced objects": (unreferenced_objects, {"unreferenced-object"}),
    "stale upload": (stale_upload, {"stale-upload"}),
    "live block queued for deletion": (live_garbage, {"live-garbage"}),
    "block on NVMe only, not queued": (unqueued_upload, {"unqueued-upload"}),
    "inode alloc": (wrong_alloc, {"wrong-alloc"}),
    "usage counters": (wrong_usage, {"wrong-usage"}),
}


@pytest.mark.parametrize("damage", REPAIRABLE)
def test_damage_is_reported_then_repaired(volume: Vol, damage: str) -> None:
    inject, kinds = REPAIRABLE[damage]
    inject(volume)
    before = snapshot(volume)
    found = fsck(volume)
    assert found.code == 1, found
    assert found.kinds == kinds
    assert all(f["fix"] and not f["repaired"] for f in found.findings)
    assert snapshot(volume) == before, "a check without --repair changed the volume"

    repaired = fsck(volume, "--repair")
    assert repaired.code == 0, repaired
    assert repaired.kinds == kinds
    assert all(f["repaired"] for f in repaired.findings)

    again = fsck(volume, "--verify")
    assert (again.code, again.findings) == (0, [])


def lookup(volume: Vol, *path: bytes) -> tuple[int, Inode]:
    with volume.meta() as meta:
        ino = ROOT_INO
        for name in path:
            ino, node = meta.lookup(ino, name)
        return ino, meta.getattr(ino)


def test_entries_that_record_no_type_pass(volume: Vol) -> None:
    """The older form of an entry, the inode alone, is valid: listings read the inode's type."""
    volume.write((keys.dentry(volume.ino["data"], b"big"), keys.u64(volume.ino["big"])))
    assert fsck(volume).code == 0


def test_dangling_dentry_is_deleted(volume: Vol) -> None:
    dangling_dentry(volume)
    run = fsck(volume)
    assert [(f["kind"], f["ino"]) for f in run.findings] == [("dangling-dentry", NO_INODE)]
    assert "/data/ghost" in run.findings[0]["subject"]
    fsck(volume, "--repair")
    with volume.kv() as kv:
        assert kv.get(keys.dentry(volume.ino["data"], b"ghost")) is None


def test_orphan_file_goes_to_lost_and_found(volume: Vol) -> None:
    orphan_file(volume)
    fsck(volume, "--repair")
    ino, node = lookup(volume, b"lost+found", b"#%d" % volume.ino["big"])
    assert (ino, node.nlink, node.size) == (volume.ino["big"], 1, BLOCK * 5 // 2)
    assert lookup(volume)[1].nlink == 4  # data, lost+found


def test_orphan_tree_keeps_its_subtree(volume: Vol) -> None:
    orphan_tree(volume)
    fsck(volume, "--repair")
    lost_found, _ = lookup(volume, b"lost+found")
    data, node = lookup(volume, b"lost+found", b"#%d" % volume.ino["data"])
    assert (data, node.parent) == (volume.ino["data"], lost_found)
    assert lookup(volume, b"lost+found", b"#%d" % data, b"sub", b"small")[0] == volume.ino["small"]
    assert lookup(volume)[1].nlink == 3  # only lost+found below root now
    assert lookup(volume, b"lost+found")[1].nlink == 3


def test_a_repair_that_cannot_be_made_is_reported(volume: Vol) -> None:
    with volume.meta() as meta:
        meta.create(ROOT_INO, b"lost+found", FILE, 0, 0)
    orphan_file(volume)
    run = fsck(volume, "--repair")
    assert run.code == 1
    assert [(f["kind"], f["repaired"]) for f in run.findings] == [("orphan-inode", False)]
    assert "repair failed" in run.findings[0]["note"] and "not a directory" in run.findings[0]["note"]


def test_directory_loop_is_cut(volume: Vol) -> None:
    directory_loop(volume)
    run = fsck(volume)
    assert [f["ino"] for f in run.findings] == [volume.ino["data"]]
    fsck(volume, "--repair")
    data, node = lookup(volume, b"lost+found", b"#%d" % volume.ino["data"])
    assert lookup(volume, b"lost+found", b"#%d" % data, b"sub")[1].nlink == 2
    with volume.kv() as kv:
        assert kv.get(keys.dentry(volume.ino["sub"], b"loop")) is None


def test_directory_hardlink_keeps_the_entry_its_parent_names(volume: Vol) -> None:
    directory_hardlink(volume)
    fsck(volume, "--repair")
    assert lookup(volume, b"data", b"sub")[0] == volume.ino["sub"]
    with volume.kv() as kv:
        assert kv.get(keys.dentry(ROOT_INO, b"alias")) is None


def test_link_counts_and_parent_are_set_right(volume: Vol) -> None:
    wrong_file_nlink(volume)
    wrong_dir_nlink(volume)
    wrong_parent(volume)
    ino = volume.ino
    run = fsck(volume)
    assert sorted((f["kind"], f["ino"]) for f in run.findings) == sorted(
        [("wrong-nlink", ino["small"]), ("wrong-nlink", ino["data"]), ("wrong-parent", ino["sub"])])
    fsck(volume, "--repair")
    assert volume.inode("small").nlink == 2  # /data/sub/small and /hardlink
    assert volume.inode("data").nlink == 3  # 2 + /data/sub
    assert volume.inode("sub").parent == ino["data"]


def test_unlinked_inode_is_freed_and_its_blocks_retired(volume: Vol) -> None:
    before = usage_of(volume)
    unlinked_while_open(volume)
    fsck(volume, "--repair")
    with volume.kv() as kv:
        assert kv.get(keys.inode(volume.ino["big"])) is None
        assert list(kv.scan(keys.ORPHAN)) == []
        assert all(kv.get(keys.garbage(b)) is not None for b in volume.blocks["big"])
    assert usage_of(volume) == (before[0] - 1, before[1] - BLOCK * 5 // 2)


def test_unreferenced_objects_are_deleted_but_garbage_is_left_to_gc(volume: Vol) -> None:
    unreferenced_objects(volume)
    with volume.kv() as kv:
        retired = [keys.read_u64(key, 1) for key, _ in kv.scan(keys.GARBAGE)]
    assert retired and all(object_path(volume.cold, b).exists() for b in retired)
    run = fsck(volume, "--repair")
    assert [f["block"] for f in run.findings] == [STRAY_OBJECT, STRAY_OBJECT + 1]
    with volume.tiers() as (nvme, cold):
        assert (nvme.get(STRAY_OBJECT), cold.get(STRAY_OBJECT + 1)) == (None, None)
        assert all(cold.get(b) is not None for b in retired)


def test_unqueued_block_is_queued_for_upload(volume: Vol) -> None:
    unqueued_upload(volume)
    fsck(volume, "--repair")
    with volume.kv() as kv:
        assert kv.get(keys.upload(volume.blocks["small"][0])) is not None


def test_usage_counters_are_rewritten(volume: Vol) -> None:
    before = usage_of(volume)
    assert before == (6, BLOCK * 5 // 2 + len(b"small file"))
    wrong_usage(volume)
    fsck(volume, "--repair")
    assert usage_of(volume) == before


# -- damage that cannot be repaired ---------------------------------------------------


def test_missing_block_names_the_file_and_bytes_lost(volume: Vol) -> None:
    lost = volume.blocks["big"][1]
    with volume.tiers() as tiers:
        for tier in tiers:
            tier.delete(lost)
    for args in ((), ("--repair",)):
        run = fsck(volume, *args)
        assert run.code == 1
        assert [(f["kind"], f["block"], f["repaired"], f["fix"]) for f in run.findings] == [
            ("missing-block", lost, False, None)]
        assert run.findings[0]["subject"].startswith(f"/data/big bytes [{BLOCK}, {2 * BLOCK})")
        assert run.summary["remaining"] == {"missing-block": 1}


def test_verify_replaces_a_corrupt_copy_from_the_intact_one(volume: Vol) -> None:
    """The object store's copy rots; the NVMe copy is intact but no longer queued for upload."""
    block = volume.blocks["big"][2]
    object_path(volume.cold, block).write_bytes(b"bit rot")
    assert fsck(volume).code == 0, "only --verify reads the data"
    run = fsck(volume, "--verify", "--repair")
    assert [(f["kind"], f["block"], f["repaired"]) for f in run.findings] == [
        ("corrupt-copy", block, True), ("unqueued-upload", block, True)]
    assert not object_path(volume.cold, block).exists()
    with volume.kv() as kv:
        assert kv.get(keys.upload(block)) is not None
    assert fsck(volume, "--verify").code == 0


def test_verify_reports_a_block_with_no_intact_copy(volume: Vol) -> None:
    block = volume.blocks["big"][2]
    with volume.tiers() as (nvme, _):
        nvme.delete(block)
    object_path(volume.cold, block).write_bytes(b"bit rot")
    run = fsck(volume, "--verify", "--repair")
    assert run.code == 1
    assert [(f["kind"], f["block"], f["fix"]) for f in run.findings] == [("corrupt-block", block, None)]
    assert run.findings[0]["subject"].startswith(f"/data/big bytes [{2 * BLOCK}, {5 * BLOCK // 2})")
    assert object_path(volume.cold, block).read_bytes() == b"bit rot"


# -- when fsck must not run ---------------------------------------------------------------


def test_refuses_while_the_volume_is_mounted(volume: Vol) -> None:
    dangling_dentry(volume)
    lock = VolumeLock.acquire(volume.config.volume.state_dir, "/mnt/elsewhere")
    try:
        run = fsck(volume, "--repair")
    finally:
        lock.close()
    assert run.code == 2
    assert "is mounted at /mnt/elsewhere by process" in run.stderr and run.findings == []
    assert fsck(volume).kinds == {"dangling-dentry"}


def test_no_volume_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(fsck_cli, ["--state-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "no aifs volume" in result.stderr
    assert not (tmp_path / "none").exists()


def test_shard_count_mismatch_is_a_usage_error(volume: Vol) -> None:
    volume.config_path.write_text(volume.config_path.read_text().replace("shards = 4", "shards = 8"))
    result = CliRunner().invoke(fsck_cli, ["-c", str(volume.config_path)])
    assert result.exit_code == 2
    assert "shards" in result.stderr
