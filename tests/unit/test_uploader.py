"""The uploader: none of its uploads beside busy writers by default, `uploads_beside_writers`
if set, all of them once the last writer closes; a slow upload holds up neither the other
slots nor their commits. Blocks go up one object each here (pack_below = 0): packs have
tests of their own."""

import pytest
import trio

from aifs.config.models import WritebackConfig
from aifs.meta import MetaEngine
from aifs.tiers.checksum import checksum
from aifs.tiers.packed import PackedStore
from aifs.vfs import writeback
from aifs.vfs.openfile import OpenFiles
from aifs.vfs.writeback import Uploader

from .conftest import BS, noise, open_writer, trio_test, upload_packed

BLOCKS = 6
CONCURRENCY = 4


class CountedUploads:
    """Wraps the tier manager's upload: the most uploads that ran at once, while writers were
    busy and after; each takes a little while, so that concurrent ones overlap."""

    def __init__(self, tiers) -> None:
        self._upload = tiers.upload
        self.running = 0
        self.writers_busy = True
        self.peak = {True: 0, False: 0}
        tiers.upload = self

    async def __call__(self, block_id: int, expected: int) -> int:
        self.running += 1
        self.peak[self.writers_busy] = max(self.peak[self.writers_busy], self.running)
        try:
            await trio.sleep(0.02)
            return await self._upload(block_id, expected)
        finally:
            self.running -= 1


async def writers_staging(tiers, seconds: float) -> None:
    """For `seconds`, a writer stages a block every 20 ms: writers count as busy."""
    with trio.move_on_after(seconds):
        while True:
            tiers.last_stage = trio.current_time()
            await trio.sleep(0.02)


@pytest.mark.parametrize("beside", [0, 1, 2])
@trio_test
async def test_uploads_beside_busy_writers_keep_to_their_share(files, beside):
    of = await files.write_sealed(b"checkpoint", noise(BLOCKS * BS, 3))
    refs = list(files.meta.all_block_refs(of.ino).values())
    settings = WritebackConfig(upload_concurrency=CONCURRENCY, uploads_beside_writers=beside, pack_below=0)
    table = OpenFiles()
    open_writer(table)
    uploader = Uploader(files.meta, files.tiers, table, settings)
    uploader.enqueue(refs)
    counted = CountedUploads(files.tiers)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploader.run)
        await writers_staging(files.tiers, 0.3)
        busy_uploads = uploader.uploaded_bytes // BS
        counted.writers_busy = False
        files.tiers.last_stage = float("-inf")
        with trio.fail_after(10):
            await uploader.wait_uploaded([ref.block_id for ref in refs])
        nursery.cancel_scope.cancel()
    assert counted.peak[True] == beside, "uploads beside busy writers"
    assert (busy_uploads > 0) == (beside > 0)
    assert counted.peak[False] <= CONCURRENCY
    assert all(files.tiers.cold.contains(ref.block_id) for ref in refs)


@trio_test
async def test_uploads_start_once_the_last_writer_closes_without_waiting_out_the_quiet(files, monkeypatch):
    monkeypatch.setattr(writeback, "QUIET_S", 3600.0)  # by the staging clock alone, busy all along
    of = await files.write_sealed(b"checkpoint", noise(BLOCKS * BS, 6))
    refs = list(files.meta.all_block_refs(of.ino).values())
    table = OpenFiles()
    writers = [open_writer(table, ino) for ino in (1, 2)]
    uploader = Uploader(files.meta, files.tiers, table, WritebackConfig(upload_concurrency=CONCURRENCY, pack_below=0))
    uploader.enqueue(refs)
    files.tiers.last_stage = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploader.run)
        for writer in writers:
            await trio.sleep(0.1)
            assert uploader.uploaded_bytes == 0, "no upload while a file being written is open"
            table.release(writer)
        uploader.writers_closed()
        with trio.fail_after(10):
            await uploader.wait_uploaded([ref.block_id for ref in refs])
        nursery.cancel_scope.cancel()
    assert all(files.tiers.cold.contains(ref.block_id) for ref in refs)


class OneSlowUpload:
    """Wraps the tier manager's upload: `slow` waits until released, the rest are quick."""

    def __init__(self, tiers, slow: int) -> None:
        self._upload = tiers.upload
        self.slow = slow
        self.release = trio.Event()
        tiers.upload = self

    async def __call__(self, block_id: int, expected: int) -> int:
        await (self.release.wait() if block_id == self.slow else trio.sleep(0.005))
        return await self._upload(block_id, expected)


@pytest.mark.parametrize("beside", [0, 2])  # 2: writers stay busy throughout
@trio_test
async def test_a_slow_upload_holds_up_neither_the_others_nor_their_commits(files, beside):
    of = await files.write_sealed(b"checkpoint", noise(3 * CONCURRENCY * BS, 5))
    refs = list(files.meta.all_block_refs(of.ino).values())
    block_ids = [ref.block_id for ref in refs]
    settings = WritebackConfig(upload_concurrency=CONCURRENCY, uploads_beside_writers=beside, pack_below=0)
    table = OpenFiles()
    open_writer(table)
    uploader = Uploader(files.meta, files.tiers, table, settings)
    uploader.enqueue(refs)
    slow = OneSlowUpload(files.tiers, block_ids[0])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploader.run)
        with trio.fail_after(10):
            while uploader.pending != [block_ids[0]]:  # the others go through the free slots
                if beside:
                    files.tiers.last_stage = trio.current_time()
                await trio.sleep(0.01)
        assert not files.meta.is_pending(block_ids[1]) and files.meta.is_pending(block_ids[0])
        slow.release.set()
        with trio.fail_after(10):
            await uploader.wait_uploaded(block_ids)
        nursery.cancel_scope.cancel()
    assert all(files.tiers.cold.contains(b) for b in block_ids)


@trio_test
async def test_small_blocks_of_several_files_go_up_as_one_pack_in_close_order(files):
    _, refs = await files.small_files(5)
    uploader = await upload_packed(files, refs)
    (pack_id,) = files.meta.pack_ids()
    assert [m.block_id for m in files.meta.pack_record(pack_id).members] == [ref.block_id for ref in refs]
    assert uploader.uploaded_packs == 1 and files.tiers.cold.contains(pack_id)
    assert not any(files.tiers.cold.contains(ref.block_id) for ref in refs), "a packed block was also put alone"
    packed = PackedStore(files.tiers.cold, files.meta)
    assert all(checksum(packed.get(ref.block_id)) == ref.checksum for ref in refs)


@pytest.mark.parametrize("ends", ["sync", "writers-quiet"])
@trio_test
async def test_a_pack_that_does_not_fill_waits_while_writers_are_busy(files, ends):
    sealed = [await files.write_sealed(f"g{i}".encode(), noise(2000, i)) for i in range(2)]
    refs = [ref for of in sealed for ref in files.meta.all_block_refs(of.ino).values()]
    table = OpenFiles()
    writer = open_writer(table)
    uploader = Uploader(files.meta, files.tiers, table, WritebackConfig(pack_wait=60, uploads_beside_writers=1))
    uploader.enqueue(refs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(uploader.run)
        await writers_staging(files.tiers, 0.6)
        assert uploader.uploaded_bytes == 0, "a pack that could still fill went up beside busy writers"
        if ends == "sync":
            uploader.hurry([refs[1].block_id])
        else:
            files.tiers.last_stage = float("-inf")
            table.release(writer)
            uploader.writers_closed()
        with trio.fail_after(10):
            await uploader.wait_uploaded([ref.block_id for ref in refs])
        nursery.cancel_scope.cancel()
    assert uploader.uploaded_packs == 1 and len(files.meta.pack_ids()) == 1


@trio_test
async def test_blocks_of_a_pack_the_other_nodes_abandoned_go_up_again(files):
    """The other nodes took this one for dead while it put a pack, and abandoned the pack:
    the commit records none of it, and its blocks go up again, in a pack of their own."""
    _, refs = await files.small_files(3)
    other_node = MetaEngine(files.meta.kv, BS, node=b"n2")
    upload_pack = files.tiers.upload_pack
    abandoned = []

    async def upload_then_abandoned(pack_id, members):
        placed = await upload_pack(pack_id, members)
        if not abandoned:
            abandoned.extend(other_node.abandon_elsewhere(other_node.unfinished_elsewhere()))
        return placed

    files.tiers.upload_pack = upload_then_abandoned
    uploader = await upload_packed(files, refs)
    (pack_id,) = files.meta.pack_ids()
    assert abandoned and pack_id not in abandoned
    assert files.meta.pending_uploads() == {} and uploader.uploaded_blocks == len(refs)
    packed = PackedStore(files.tiers.cold, files.meta)
    assert all(checksum(packed.get(ref.block_id)) == ref.checksum for ref in refs)
