"""FileData over a real MetaEngine and real tiers: block buffers, sealing, holes, truncation."""

import pytest
import trio
import trio.testing

from aifs.config.models import WritebackConfig
from aifs.tiers.checksum import checksum
from aifs.tiers.manager import INLINE_BYTES
from aifs.tiers.ram import RamTier
from aifs.vfs.openfile import OpenFile, OpenFiles
from aifs.vfs.prefetch import Prefetcher
from aifs.vfs.readahead import READ_THROUGH_KEPT, Readahead
from aifs.vfs.repack import Repacker
from aifs.vfs.writeback import GarbageCollector

from .conftest import BS, FAR_FUTURE, noise, open_writer, trio_test


def apply(model: bytearray, offset: int, data: bytes) -> None:
    """What a write does to a plain byte array (holes become zeros)."""
    if len(model) < offset:
        model.extend(bytes(offset - len(model)))
    model[offset:offset + len(data)] = data


def resize(model: bytearray, size: int) -> None:
    del model[size:]
    model.extend(bytes(size - len(model)))


async def assert_contents(files, of, model: bytearray) -> None:
    """Both the live view (open file) and, once sealed, the stored view match `model`."""
    assert await files.contents(of.ino, of) == bytes(model)
    await files.data.seal(of)
    assert files.size(of.ino) == len(model)
    assert await files.contents(of.ino) == bytes(model)


@trio_test
async def test_write_spanning_blocks(files):
    of = files.open_new(b"f")
    data = noise(2 * BS + BS // 2, 1)
    await files.data.write(of, 1000, data)
    assert of.size == 1000 + len(data)
    assert sorted(of.dirty) == [2], "full blocks are sealed at once, the partial one waits"
    assert sorted(files.meta.all_block_refs(of.ino)) == [0, 1]
    model = bytearray()
    apply(model, 1000, data)
    await assert_contents(files, of, model)
    refs = files.meta.all_block_refs(of.ino)
    assert sorted(refs) == [0, 1, 2]
    assert [r.length for r in refs.values()] == [BS, BS, len(model) - 2 * BS]


@trio_test
async def test_small_writes_fill_a_block(files):
    of = files.open_new(b"f")
    model = bytearray()
    piece = 4096
    for i in range(BS // piece + 3):
        data = noise(piece, i)
        await files.data.write(of, i * piece, data)
        apply(model, i * piece, data)
    assert sorted(of.dirty) == [1]
    assert files.meta.block_refs(of.ino, [0])[0].length == BS
    await assert_contents(files, of, model)


@trio_test
async def test_partial_overwrite_is_read_modify_write(files):
    original = noise(3 * BS, 2)
    first = await files.write_sealed(b"f", original)
    old_ids = {i: r.block_id for i, r in files.meta.all_block_refs(first.ino).items()}
    of = OpenFile(first.ino, len(original))
    model = bytearray(original)
    patch = noise(200, 3)
    await files.data.write(of, BS - 100, patch)
    apply(model, BS - 100, patch)
    await assert_contents(files, of, model)
    refs = files.meta.all_block_refs(of.ino)
    assert refs[2].block_id == old_ids[2], "an untouched block keeps its object"
    assert refs[0].block_id != old_ids[0] and refs[1].block_id != old_ids[1]
    assert sorted(files.meta.garbage_due(now_ns=FAR_FUTURE)) == [old_ids[0], old_ids[1]]


@trio_test
async def test_sparse_holes_read_as_zeros(files):
    of = files.open_new(b"f")
    tail = noise(300, 4)
    await files.data.write(of, 3 * BS + 10, tail)
    inner = noise(10, 5)
    await files.data.write(of, BS + 7, inner)
    model = bytearray()
    apply(model, 3 * BS + 10, tail)
    apply(model, BS + 7, inner)
    await assert_contents(files, of, model)
    assert sorted(files.meta.all_block_refs(of.ino)) == [1, 3]
    assert files.meta.getattr(of.ino).alloc == (BS + 7 + 10 - BS) + (10 + 300)


@trio_test
async def test_read_past_eof(files):
    of = await files.write_sealed(b"f", noise(BS + 5, 6))
    size = BS + 5
    assert await files.data.read(of.ino, None, size, size, 100) == b""
    assert await files.data.read(of.ino, None, size, size + BS, 100) == b""
    assert await files.data.read(of.ino, None, size, size - 3, 100) == noise(BS + 5, 6)[-3:]
    assert await files.data.read(of.ino, None, size, 0, 0) == b""


@trio_test
async def test_read_of_an_arbitrary_range(files):
    content = noise(4 * BS, 7)
    of = await files.write_sealed(b"f", content)
    for offset, size in [(0, 1), (BS - 1, 2), (BS // 3, 2 * BS), (3 * BS + 1, BS)]:
        got = await files.data.read(of.ino, None, len(content), offset, size)
        assert got == content[offset:offset + size]


@trio_test
async def test_seal_commits_refs_and_queues_uploads(files):
    of = files.open_new(b"f")
    data = noise(BS + 123, 8)
    await files.data.write(of, 0, data)
    assert list(files.meta.pending_uploads()) == [of.unsynced[0]]
    assert sorted(of.dirty) == [1] and sorted(files.meta.all_block_refs(of.ino)) == [0]
    await files.data.seal(of)
    assert of.dirty == {}
    refs = files.meta.all_block_refs(of.ino)
    assert [r.block_id for r in refs.values()] == of.unsynced
    assert sorted(files.meta.pending_uploads()) == sorted(of.unsynced)
    assert files.staged == of.unsynced, "every committed block is handed to the uploader once"
    node = files.meta.getattr(of.ino)
    assert (node.size, node.alloc, node.mtime_ns) == (len(data), len(data), of.mtime_ns)
    for index, r in refs.items():
        staged = files.tiers.nvme.get(r.block_id)
        assert staged == data[index * BS:index * BS + r.length]
        assert checksum(staged) == r.checksum
        assert files.tiers.nvme.is_dirty(r.block_id)


@trio_test
async def test_seal_of_nothing_commits_nothing(files):
    of = files.open_new(b"f")
    before = files.meta.getattr(of.ino)
    await files.data.seal(of)
    assert files.meta.getattr(of.ino) == before
    assert list(files.meta.pending_uploads()) == []


@trio_test
async def test_reads_come_back_from_lower_tiers(files):
    content = noise(3 * BS, 9)
    of = await files.write_sealed(b"f", content)
    files.tiers.ram = RamTier(0)
    for r in files.meta.all_block_refs(of.ino).values():
        await files.tiers.upload(r.block_id, r.checksum)
        files.tiers.nvme.delete(r.block_id)
    assert await files.contents(of.ino) == content
    assert sorted(files.tiers.cold.gets) == sorted(
        r.block_id for r in files.meta.all_block_refs(of.ino).values()
    )


@pytest.mark.parametrize("open_during_truncate", [False, True])
@trio_test
async def test_truncate_down_inside_a_block_then_extend(files, open_during_truncate):
    content = noise(2 * BS + 500, 10)
    of = await files.write_sealed(b"f", content)
    handle = of if open_during_truncate else None
    cut = BS + 100
    await files.data.truncate(of.ino, handle, cut)
    assert files.size(of.ino) == cut
    assert sorted(files.meta.all_block_refs(of.ino)) == [0, 1]
    cut_ref = files.meta.block_refs(of.ino, [1])[1]
    assert cut_ref.length == 100
    assert files.staged[-1] == cut_ref.block_id and files.meta.is_pending(cut_ref.block_id)
    await files.data.truncate(of.ino, handle, 3 * BS)
    model = bytearray(content)
    resize(model, cut)
    resize(model, 3 * BS)
    assert await files.contents(of.ino) == bytes(model)
    assert files.meta.getattr(of.ino).alloc == cut


@trio_test
async def test_truncate_with_unsealed_writes_then_extend(files):
    of = files.open_new(b"f")
    model = bytearray()
    data = noise(BS + 1000, 11)
    await files.data.write(of, 0, data)
    apply(model, 0, data)
    more = noise(BS, 12)
    await files.data.write(of, 3 * BS, more)  # block 3 stays dirty
    apply(model, 3 * BS, more)
    await files.data.truncate(of.ino, of, BS + 10)
    resize(model, BS + 10)
    assert of.size == BS + 10 and 3 not in of.dirty
    await files.data.truncate(of.ino, of, 4 * BS)
    resize(model, 4 * BS)
    tail = noise(20, 13)
    await files.data.write(of, BS + 50, tail)  # rewrites the cut block past its end
    apply(model, BS + 50, tail)
    await assert_contents(files, of, model)


@trio_test
async def test_truncate_to_block_boundary_and_zero(files):
    content = noise(3 * BS, 14)
    of = await files.write_sealed(b"f", content)
    await files.data.truncate(of.ino, None, 2 * BS)
    assert await files.contents(of.ino) == content[:2 * BS]
    assert sorted(files.meta.all_block_refs(of.ino)) == [0, 1]
    await files.data.truncate(of.ino, None, 0)
    assert await files.contents(of.ino) == b""
    assert files.meta.all_block_refs(of.ino) == {}
    assert files.meta.volume_stats() == (2, 0)


# -- interplay with concurrent writers (as aifs.vfs.volume drives FileData: reads take
#    no lock, writes and seals hold `of.lock`) ------------------------------------

SLOW_BS = 2 * INLINE_BYTES  # blocks this big go through worker threads


def slow_files(files_factory):
    """Blocks big enough to be read on worker threads; RAM holds nothing."""
    return files_factory(block_size=SLOW_BS, ram=0)


async def read_while_writing(files, of, offset: int, data: bytes) -> bytes:
    """Read the whole open file while another task writes `data` under the file lock."""
    files.tiers.nvme.delay = 0.3
    result = {}

    async def reader():
        result["data"] = await files.data.read(of.ino, of, of.size, 0, of.size)

    async def writer():
        await trio.sleep(0.05)  # the reader is now waiting for a block from NVMe
        async with of.lock:
            await files.data.write(of, offset, data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
    return result["data"]


@trio_test
async def test_read_racing_a_seal_does_not_lose_the_sealed_block(files_factory):
    files = slow_files(files_factory)
    of = files.open_new(b"f")
    await files.data.write(of, 0, b"a" * SLOW_BS)  # block 0: sealed
    await files.data.write(of, SLOW_BS, b"b" * 100)  # block 1: a partial buffer
    got = await read_while_writing(files, of, SLOW_BS + 100, b"c" * (SLOW_BS - 100))  # seals 1
    assert got[:SLOW_BS] == b"a" * SLOW_BS
    assert got[SLOW_BS:SLOW_BS + 100] == b"b" * 100, "bytes written before the read read as zeros"


@trio_test
async def test_write_during_read_of_its_buffer(files_factory):
    files = slow_files(files_factory)
    of = files.open_new(b"f")
    await files.data.write(of, SLOW_BS, b"a" * SLOW_BS)  # block 1: sealed
    await files.data.write(of, 0, b"b" * 100)  # block 0: a partial buffer
    got = await read_while_writing(files, of, 100, b"c" * 100)  # grows block 0's buffer
    assert got[:100] == b"b" * 100 and got[SLOW_BS:] == b"a" * SLOW_BS
    assert await files.contents(of.ino, of) == b"b" * 100 + b"c" * 100 + bytes(SLOW_BS - 200) + b"a" * SLOW_BS


# -- RAM policy as file reads exercise it ------------------------------------------


@pytest.mark.parametrize("piece", [BS, BS // 4], ids=["whole-block-reads", "quarter-block-reads"])
@trio_test
async def test_hot_file_survives_one_sequential_pass_over_a_big_file(files, piece):
    """A block read twice outranks a block streamed once (docs/tiers.md), also when
    the stream arrives in pieces smaller than a block, as FUSE sends it (128 KiB)."""
    hot = await files.write_sealed(b"hot", noise(2 * BS, 15))
    big = await files.write_sealed(b"big", noise(24 * BS, 16))
    files.tiers.ram = RamTier(8 * BS)  # cold RAM, as after a remount
    for _ in range(2):
        await files.contents(hot.ino)
    reader = OpenFile(big.ino, 24 * BS)  # one open handle streams the file, as a DataLoader does
    for offset in range(0, 24 * BS, piece):
        await files.data.read(big.ino, reader, 24 * BS, offset, piece)
    hot_ids = [r.block_id for r in files.meta.all_block_refs(hot.ino).values()]
    assert [files.tiers.ram.contains(b) for b in hot_ids] == [True, True]


@trio_test
async def test_a_stream_read_ahead_keeps_only_the_blocks_it_reads_now(files):
    """Blocks fetched ahead leave RAM once the reader is READ_THROUGH_KEPT blocks past them,
    so a stream reuses a few blocks' memory; a block read again before that stays."""
    big = await files.write_sealed(b"big", noise(24 * BS, 17))
    files.tiers.ram = RamTier(64 * BS)
    reader = OpenFile(big.ino, 24 * BS)
    reader.readahead = Readahead(BS)
    async with trio.open_nursery() as nursery:
        files.data.prefetch = Prefetcher(files.tiers, lambda fn, *args: nursery.start_soon(fn, *args) or True)
        got = []
        for offset in range(0, 24 * BS, BS // 4):
            got.append(await files.data.read(big.ino, reader, 24 * BS, offset, BS // 4))
            await trio.testing.wait_all_tasks_blocked()  # the fetches ahead land before the next read
    ids = [r.block_id for r in files.meta.all_block_refs(big.ino).values()]
    assert b"".join(bytes(g) for g in got) == noise(24 * BS, 17)
    in_ram = [i for i, block_id in enumerate(ids) if files.tiers.holds("ram", block_id)]
    assert in_ram[:1] == [0] and all(i >= 24 - READ_THROUGH_KEPT - 1 for i in in_ram[1:]), in_ram


@trio_test
async def test_garbage_waits_while_writers_stage_then_goes_in_bulk(files):
    first = await files.write_sealed(b"g", noise(3 * BS, 4))
    refs = list(files.meta.all_block_refs(first.ino).values())
    for ref in refs:
        await files.tiers.upload(ref.block_id, ref.checksum)
    old = [ref.block_id for ref in refs]
    files.meta.garbage_grace_ns = 0
    await files.data.truncate(first.ino, None, 0)
    table = OpenFiles()
    open_writer(table)
    collector = GarbageCollector(files.meta, files.tiers, table, Repacker(files.meta, files.tiers, WritebackConfig()))
    files.tiers.last_stage = trio.current_time()  # a writer staged a block just now
    assert await collector.collect() == 0, "garbage is never urgent"
    files.tiers.last_stage = float("-inf")
    assert await collector.collect() == 3
    assert not any(files.tiers.cold.contains(b) or files.tiers.nvme.contains(b) for b in old)
    assert files.meta.garbage_due() == []
