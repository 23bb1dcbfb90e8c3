"""The metadata store when its disk fills up (a real tmpfs) or a write fails otherwise:
errors become ENOSPC or EIO, reads go on, memory mirrors stay as stored, and the store
reopens itself once it can write again."""

import errno
import logging
import resource
import signal
import time

import pytest
import trio
from smallfs import small_fs_at

from aifs.config.models import WritebackConfig
from aifs.meta import MetaEngine, keys
from aifs.meta.ids import IdAllocator
from aifs.meta.kv import Batch
from aifs.meta.rocks_kv import ShardedRocksKV
from aifs.meta.writestate import MetaWriteFailed, classify
from aifs.vfs import writeback
from aifs.vfs.openfile import OpenFiles
from aifs.vfs.pinning import Pinner
from aifs.vfs.writeback import GarbageCollector, Uploader

from .conftest import BS, FAR_FUTURE, ROOT, SHARDS, Files, fs_error, mkfile, noise, ref, trio_test

REFUSALS_BOUND = 100_000  # commits a full tmpfs takes at most before RocksDB's WAL append fails
RECOVERY_WAIT_S = 30.0


@pytest.fixture
def small_fs(tmp_path):
    with small_fs_at(tmp_path / "small") as fs:
        yield fs


@pytest.fixture
def meta_dir(small_fs):
    path = small_fs.path / "meta"
    path.mkdir()
    return path


def put(kv, key: bytes, value: bytes = b"v") -> None:
    batch = Batch()
    batch.put(key, value)
    kv.commit(batch)


def write_until_refused(kv) -> tuple[list[bytes], bytes, MetaWriteFailed]:
    """Commit 1 KiB values until the store refuses one: (keys acknowledged, the key
    refused, the error)."""
    acked = []
    for i in range(REFUSALS_BOUND):
        key = keys.counter(b"fill-%d" % i)
        try:
            put(kv, key, bytes(1024))
        except MetaWriteFailed as e:
            return acked, key, e
        acked.append(key)
    raise AssertionError(f"{REFUSALS_BOUND} commits went through on a full file system")


def create_until_refused(meta: MetaEngine) -> tuple[list[int], MetaWriteFailed]:
    made = []
    for i in range(REFUSALS_BOUND):
        try:
            made.append(mkfile(meta, b"f%d" % i))
        except MetaWriteFailed as e:
            return made, e
    raise AssertionError(f"{REFUSALS_BOUND} creates went through on a full file system")


def wait_writable(kv) -> None:
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while not kv.writable():
        assert time.monotonic() < deadline, f"still read-only: {kv.write_failure}"
        time.sleep(0.05)


# -- classification --------------------------------------------------------


@pytest.mark.parametrize("message, code", [
    ("IO error: No space left on device: While appending to file: /x/000004.log: No space left on device",
     errno.ENOSPC),
    ("IO error: Disk quota exceeded: While appending to file: /x/000004.log: Disk quota exceeded", errno.ENOSPC),
    ("IO error: File too large: While appending to file: /x/000004.log: File too large", errno.EIO),
    ("IO error: Writer has previous error.", errno.EIO),
    ("Corruption: block checksum mismatch", errno.EIO),
])
def test_rocksdb_errors_become_enospc_or_eio_naming_the_metadata_directory(tmp_path, message, code):
    error = classify(Exception(message), tmp_path / "meta")
    assert error.errno == code
    assert f"{tmp_path / 'meta'}" in error.reason and "\n" not in error.reason
    assert ("space is freed" in error.reason) == (code == errno.ENOSPC)
    if code == errno.EIO:
        assert message in error.reason


# -- a full disk -------------------------------------------------------------


def test_a_full_disk_makes_the_store_read_only_until_space_returns(small_fs, meta_dir, caplog):
    caplog.set_level(logging.INFO, logger="aifs.meta")
    kv = ShardedRocksKV(meta_dir, SHARDS)
    put(kv, keys.counter(b"before"))
    kv.sync()
    assert kv.write_failure is None
    small_fs.fill()
    acked, refused, failure = write_until_refused(kv)
    assert failure.errno == errno.ENOSPC
    assert kv.write_failure == failure.reason and str(meta_dir) in failure.reason

    assert kv.get(keys.counter(b"before")) == b"v", "reads go on"
    assert all(kv.get(key) is not None for key in acked)
    assert kv.get(refused) is None, "a refused batch is not half there"
    for _ in range(3):
        with fs_error(errno.ENOSPC):
            put(kv, keys.counter(b"while-full"))
    kv.sync()  # what was acknowledged becomes durable all the same

    small_fs.free()
    put(kv, keys.counter(b"after"))
    assert kv.write_failure is None
    kv.sync()
    kv.close()

    kv = ShardedRocksKV(meta_dir, SHARDS)
    try:
        assert all(kv.get(key) is not None for key in [*acked, keys.counter(b"before"), keys.counter(b"after")])
        assert kv.get(refused) is None and kv.get(keys.counter(b"while-full")) is None
    finally:
        kv.close()
    turned = [r for r in caplog.records if r.levelno == logging.ERROR]
    back = [r for r in caplog.records if "writable again" in r.getMessage()]
    assert len(turned) == 1 and len(back) == 1, [r.getMessage() for r in caplog.records]


def test_a_store_closed_while_its_disk_is_full_keeps_what_it_acknowledged(small_fs, meta_dir):
    kv = ShardedRocksKV(meta_dir, SHARDS)
    small_fs.fill()
    acked, _, _ = write_until_refused(kv)
    kv.close()
    small_fs.free()
    kv = ShardedRocksKV(meta_dir, SHARDS)
    try:
        assert kv.write_failure is None
        assert all(kv.get(key) is not None for key in acked)
    finally:
        kv.close()


def test_a_store_opened_on_a_full_disk_serves_reads_and_reopens_once_there_is_room(small_fs, meta_dir):
    kv = ShardedRocksKV(meta_dir, SHARDS)
    for i in range(64):  # a WAL to replay into a table file at the next open
        put(kv, keys.counter(b"k%d" % i), bytes(1024))
    kv.close()
    small_fs.fill()

    kv = ShardedRocksKV(meta_dir, SHARDS)
    try:
        assert kv.write_failure is not None and "space is freed" in kv.write_failure
        assert kv.get(keys.counter(b"k63")) == bytes(1024)
        with fs_error(errno.ENOSPC):
            put(kv, keys.counter(b"refused"))
        small_fs.free()
        put(kv, keys.counter(b"after"))
        assert kv.write_failure is None and kv.get(keys.counter(b"after")) == b"v"
    finally:
        kv.close()


# -- another failure: EIO --------------------------------------------------


def test_a_write_failing_otherwise_is_eio_and_the_store_reopens_after_a_pause(tmp_path):
    """The file size limit makes RocksDB's next WAL append fail with EFBIG: no full disk."""
    (tmp_path / "meta").mkdir()
    kv = ShardedRocksKV(tmp_path / "meta", SHARDS)
    put(kv, keys.counter(b"before"))
    wal = max((tmp_path / "meta").glob("*.log"), key=lambda p: p.stat().st_mtime)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size, limits[1]))
    try:
        acked, refused, failure = write_until_refused(kv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old_handler)
    try:
        assert failure.errno == errno.EIO and "File too large" in failure.reason
        with fs_error(errno.EIO):
            kv.sync()  # a failure that may have cost pages of the WAL is never papered over
        assert kv.get(keys.counter(b"before")) == b"v"
        wait_writable(kv)
        put(kv, keys.counter(b"after"))
        assert kv.get(refused) is None and all(kv.get(key) is not None for key in acked)
    finally:
        kv.close()


# -- memory mirrors ------------------------------------------------------------


def test_refused_batches_leave_the_usage_totals_as_stored(small_fs, meta_dir):
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        small_fs.fill()
        made, failure = create_until_refused(meta)
        assert failure.errno == errno.ENOSPC
        assert meta.volume_stats() == (1 + len(made), 0)
        with fs_error(errno.ENOSPC):
            meta.commit_blocks(made[0], {0: ref(7, 1000)}, 1000)
        assert meta.volume_stats() == (1 + len(made), 0)
        small_fs.free()
        meta.commit_blocks(made[0], {0: ref(7, 1000)}, 1000)
        assert meta.volume_stats() == (1 + len(made), 1000)
    finally:
        meta.close()
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        assert meta.volume_stats() == (1 + len(made), 1000)
    finally:
        meta.close()


def test_no_id_is_handed_out_twice_when_a_range_could_not_be_reserved(small_fs, meta_dir):
    kv = ShardedRocksKV(meta_dir, SHARDS)
    ids = IdAllocator(kv, b"test_ids", 1, chunk=1)  # every id reserves a range: a write each
    handed = []
    small_fs.fill()
    with pytest.raises(MetaWriteFailed):
        for _ in range(REFUSALS_BOUND):
            handed.append(ids.next())
    with fs_error(errno.ENOSPC):
        ids.next()
    small_fs.free()
    handed.append(ids.next())
    kv.close()
    kv = ShardedRocksKV(meta_dir, SHARDS)
    try:
        assert IdAllocator(kv, b"test_ids", 1, chunk=1).next() > max(handed)
    finally:
        kv.close()


def test_an_access_goes_unrecorded_rather_than_failing_a_read(small_fs, meta_dir):
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        ino = mkfile(meta, b"f")
        small_fs.fill()
        create_until_refused(meta)
        before = meta.getattr(ino).atime_ns
        meta.set_atime(ino, before + 10**9)
        assert meta.getattr(ino).atime_ns == before
    finally:
        meta.close()


def test_orphans_wait_for_the_store_and_are_freed_once_it_writes(small_fs, meta_dir):
    meta = MetaEngine.open(meta_dir, SHARDS, BS, garbage_grace_ns=0)
    try:
        orphan = mkfile(meta, b"orphan")
        meta.commit_blocks(orphan, {0: ref(11, 1000)}, 1000)
        meta.unlink(ROOT, b"orphan", lambda ino: True)  # open at the time: kept as an orphan
        small_fs.fill()
        create_until_refused(meta)
        gc = GarbageCollector(meta, None, OpenFiles(), None)
        assert gc.reclaim_orphans() == 0
        assert meta.orphans() == [orphan]
        small_fs.free()
        assert gc.reclaim_orphans() == 1
        assert meta.orphans() == [] and meta.garbage_due(now_ns=FAR_FUTURE) == [11]
    finally:
        meta.close()


@trio_test
async def test_uploads_whose_commit_is_refused_stay_queued_until_the_store_writes(
        small_fs, meta_dir, tiers_factory, monkeypatch):
    monkeypatch.setattr(writeback, "RETRY_S", 0.05)
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        files = Files(meta, tiers_factory())
        of = await files.write_sealed(b"data", noise(3 * BS, 1))
        block_ids = [r.block_id for r in meta.all_block_refs(of.ino).values()]
        small_fs.fill()
        create_until_refused(meta)
        uploader = Uploader(meta, files.tiers, OpenFiles(), WritebackConfig(pack_below=0))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(uploader.run)
            with trio.fail_after(10):
                while not all(files.tiers.cold.contains(b) for b in block_ids):
                    await trio.sleep(0.01)
                with fs_error(errno.ENOSPC):
                    await uploader.wait_uploaded(block_ids)
            assert all(meta.is_pending(b) for b in block_ids), "nothing marked uploaded that was not committed"
            assert sorted(uploader.pending) == sorted(block_ids) and uploader.uploaded_blocks == 0
            small_fs.free()
            with trio.fail_after(RECOVERY_WAIT_S):
                while uploader.pending_of(block_ids):
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert not any(meta.is_pending(b) for b in block_ids) and uploader.uploaded_blocks == len(block_ids)
    finally:
        meta.close()


@trio_test
async def test_blocks_staged_for_a_refused_commit_leave_staging(small_fs, meta_dir, tiers_factory):
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        files = Files(meta, tiers_factory())
        of = files.open_new(b"f")
        small_fs.fill()
        with pytest.raises(MetaWriteFailed):
            for i in range(REFUSALS_BOUND):
                await files.data.write(of, i * BS, noise(BS, i))  # a full block seals at once
        committed = meta.all_block_refs(of.ino)
        assert files.tiers.nvme.dirty_bytes() == len(committed) * BS, "only committed blocks stay staged"
        assert len(of.dirty) == 1, "the refused block stays buffered"
        small_fs.free()
        await files.data.seal(of)
        assert files.tiers.nvme.dirty_bytes() == (len(committed) + 1) * BS
        assert await files.contents(of.ino) == b"".join(noise(BS, i) for i in range(len(committed) + 1))
    finally:
        meta.close()


@trio_test
async def test_pins_change_only_with_the_metadata(small_fs, meta_dir, tiers_factory):
    meta = MetaEngine.open(meta_dir, SHARDS, BS)
    try:
        files = Files(meta, tiers_factory())
        pinned = (await files.write_sealed(b"pinned", noise(2 * BS, 1))).ino
        other = (await files.write_sealed(b"other", noise(BS, 2))).ino
        pinner = Pinner(meta, files.tiers)
        await pinner.pin([pinned], "nvme")
        blocks = [r.block_id for r in meta.all_block_refs(pinned).values()]
        small_fs.fill()
        create_until_refused(meta)

        with fs_error(errno.ENOSPC):
            pinner.unpin([pinned])
        assert pinner.pins == {pinned: "nvme"} == meta.pins()
        assert all(files.tiers.nvme.is_pinned(b) for b in blocks)
        assert pinner.pin_by_rule(other, "ram") is False, "an open under a pin rule still works"
        assert meta.pins() == {pinned: "nvme"}

        small_fs.free()
        assert pinner.unpin([pinned]) == 1
        assert pinner.pins == {} == meta.pins() and not any(files.tiers.nvme.is_pinned(b) for b in blocks)
        assert pinner.pin_by_rule(other, "ram") is True and meta.pins() == {other: "ram"}
    finally:
        meta.close()
