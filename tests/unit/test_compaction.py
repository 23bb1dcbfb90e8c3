"""A pack left more than half dead is packed anew even when the collector that saw its
blocks die could not do it (stopped, or writers kept it waiting): the next collector finds it
by scanning the pack records, moves the live blocks into a new pack, and retires the old."""

import trio

from aifs.config.models import WritebackConfig
from aifs.tiers.checksum import checksum
from aifs.tiers.packed import PackedStore
from aifs.vfs.openfile import OpenFiles
from aifs.vfs.repack import Repacker
from aifs.vfs.writeback import GarbageCollector

from .conftest import open_writer, trio_test, upload_packed


def collector(files, table: OpenFiles) -> GarbageCollector:
    return GarbageCollector(files.meta, files.tiers, table, Repacker(files.meta, files.tiers, WritebackConfig()))


@trio_test
async def test_a_mostly_dead_pack_a_stopped_collector_left_is_packed_anew_by_the_next(files):
    sealed, refs = await files.small_files(5)
    await upload_packed(files, refs)
    (old_pack,) = files.meta.pack_ids()
    files.meta.garbage_grace_ns = 0
    for of in sealed[1:]:  # 14,000 of 15,000 bytes die
        await files.data.truncate(of.ino, None, 0)

    writing = OpenFiles()
    open_writer(writing)
    first = collector(files, writing)
    files.tiers.last_stage = float("-inf")  # the writer has gone quiet
    assert await first.collect() == 4  # the pack is seen to be mostly dead
    files.tiers.last_stage = trio.current_time()  # writers at work: no compaction now
    assert await first.compact() == 0
    assert files.meta.sparse_packs() == [old_pack]  # and the first collector stops here

    second = collector(files, OpenFiles())
    assert await second.compact() == 1
    (new_pack,) = files.meta.pack_ids()
    assert new_pack != old_pack and files.meta.sparse_packs() == []
    assert files.meta.pack_record(new_pack).size == 1000
    assert checksum(PackedStore(files.tiers.cold, files.meta).get(refs[0].block_id)) == refs[0].checksum
    assert await second.compact() == 0
