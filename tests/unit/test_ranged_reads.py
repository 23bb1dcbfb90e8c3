"""Small random reads fetch only the chunks they need, each verified against its own checksum."""

import errno
import struct

import pytest

from aifs.tiers.checksum import CHUNK, checksum, chunk_sums, sums_of
from aifs.vfs.readahead import Readahead
from tests.unit.conftest import fs_error, noise, trio_test

BLOCK = 4 << 20


def in_cold(tiers, block_id: int, data: bytes) -> bytes:
    tiers.cold.put(block_id, data)
    return chunk_sums(data)


@pytest.mark.parametrize("cuts", [[], [CHUNK], [1000, CHUNK + 7, 3 * CHUNK - 1], [CHUNK // 2]])
def test_checksums_of_parts_are_those_of_the_joined_bytes(cuts):
    data = noise(5 * CHUNK + 123, 9)
    edges = [0, *cuts, len(data)]
    parts = [memoryview(data)[a:b] for a, b in zip(edges, edges[1:])]
    assert sums_of(parts) == (checksum(data), chunk_sums(data))
    each = [checksum(data[i:i + CHUNK]) for i in range(0, len(data), CHUNK)]
    assert chunk_sums(data) == struct.pack("<6Q", *each)
    assert sums_of([data[:CHUNK]]) == (checksum(data[:CHUNK]), b""), "one chunk: the whole checksum covers it"


@trio_test
async def test_a_range_from_the_cold_tier_reads_only_its_chunks(tiers_factory):
    tiers = tiers_factory()
    data = noise(BLOCK, 1)
    sums = in_cold(tiers, 7, data)
    lo, hi = 3 * CHUNK - 100, 3 * CHUNK + 5000  # straddles chunks 2 and 3
    assert await tiers.read_range(7, BLOCK, sums, lo, hi) == data[lo:hi]
    assert tiers.stats["objstore"].bytes_read == 2 * CHUNK
    assert not tiers.ram.contains(7) and not tiers.nvme.contains(7), "a range fills no tier"


@trio_test
async def test_a_range_of_a_block_on_nvme_is_read_from_nvme(tiers_factory):
    tiers = tiers_factory()
    data = noise(BLOCK, 2)
    tiers.nvme.put(8, data)
    assert await tiers.read_range(8, BLOCK, chunk_sums(data), BLOCK - 10, BLOCK) == data[-10:]
    assert tiers.stats["nvme"].bytes_read == CHUNK and tiers.stats["objstore"].hits == 0


@trio_test
async def test_a_block_in_ram_serves_ranges_without_fetching(tiers_factory):
    tiers = tiers_factory()
    data = noise(BLOCK, 3)
    tiers.ram.put(9, data)
    assert await tiers.read_range(9, BLOCK, chunk_sums(data), 10, 20) == data[10:20]
    assert tiers.nvme.gets == {} and tiers.stats["objstore"].hits == 0


@trio_test
async def test_a_rotten_chunk_on_nvme_falls_through_to_the_cold_copy(tiers_factory):
    tiers = tiers_factory()
    data = noise(BLOCK, 4)
    sums = in_cold(tiers, 10, data)
    rotten = bytearray(data)
    rotten[CHUNK + 1] ^= 0xFF
    tiers.nvme.put(10, bytes(rotten))
    assert await tiers.read_range(10, BLOCK, sums, CHUNK, CHUNK + 10) == data[CHUNK:CHUNK + 10]
    assert not tiers.nvme.contains(10), "the rotten copy is dropped"
    assert tiers.stats["objstore"].bytes_read == CHUNK


@trio_test
async def test_a_range_rotten_in_every_tier_is_eio(tiers_factory):
    tiers = tiers_factory()
    data = noise(BLOCK, 5)
    sums = chunk_sums(data)
    rotten = bytearray(data)
    rotten[5] ^= 1
    tiers.cold.put(11, bytes(rotten))
    with fs_error(errno.EIO):
        await tiers.read_range(11, BLOCK, sums, 0, 100)
    assert await tiers.read_range(11, BLOCK, sums, CHUNK, CHUNK + 1) == data[CHUNK:CHUNK + 1], (
        "only the rotten chunk is refused"
    )


# -- through FileData: which reads take ranges ----------------------------------------


async def cold_only_file(files, content: bytes):
    """A sealed file whose blocks are only in the cold tier, opened with readahead as a mount opens it."""
    of = await files.write_sealed(b"f", content)
    for ref in files.meta.all_block_refs(of.ino).values():
        await files.tiers.upload(ref.block_id, ref.checksum)
        files.tiers.ram.delete(ref.block_id)
        files.tiers.nvme.delete(ref.block_id)
    of.readahead = Readahead(files.bs)
    return of


@trio_test
async def test_a_random_small_read_fetches_a_chunk_and_a_sequential_one_the_block(files_factory):
    files = files_factory(block_size=BLOCK)
    content = noise(3 * BLOCK, 6)
    of = await cold_only_file(files, content)
    assert await files.data.read(of.ino, of, of.size, 0, 4096) == content[:4096]
    assert files.tiers.stats["objstore"].bytes_read == BLOCK, "a read from the start is sequential"
    offset = 2 * BLOCK + 5 * CHUNK + 17
    assert await files.data.read(of.ino, of, of.size, offset, 4096) == content[offset:offset + 4096]
    assert files.tiers.stats["objstore"].bytes_read == BLOCK + CHUNK, "a jump is random: one chunk"


@trio_test
async def test_a_block_rule_fetches_whole_blocks(files_factory):
    files = files_factory(block_size=BLOCK)
    content = noise(BLOCK, 7)
    of = await cold_only_file(files, content)
    of.ranged = False
    assert await files.data.read(of.ino, of, of.size, 3 * CHUNK, 10) == content[3 * CHUNK:3 * CHUNK + 10]
    assert files.tiers.stats["objstore"].bytes_read == BLOCK


@trio_test
async def test_small_blocks_have_no_chunk_sums_and_read_whole(files_factory):
    files = files_factory(block_size=CHUNK)
    of = await cold_only_file(files, noise(CHUNK, 8))
    ref = files.meta.block_refs(of.ino, [0])[0]
    assert ref.sums == b"" and ref.checksum == checksum(noise(CHUNK, 8))
    await files.data.read(of.ino, of, of.size, 100, 10)
    assert files.tiers.stats["objstore"].bytes_read == CHUNK
