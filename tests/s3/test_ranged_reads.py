"""Small random reads of a file held only in S3 fetch ranged GETs of the chunks they need, not
whole blocks, while they stay within a few of its blocks; a block read that way a few times is
fetched whole in the background and then served locally, and so is the whole file once the reads
have spread over it (only the blocks touched from then on, where the file would take more than a
quarter of NVMe); a path with `fetch = "block"` always fetches whole blocks."""

import os

from aifs.tiers.checksum import CHUNK
from tests.helpers import random_page_reads

from .helpers_mount import BLOCK, make_s3_volume, status, sync_wait, wait_for

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

BLOCKS = 12
PAGE = 4096


def cold_file(make_s3_volume, endpoint: str, bucket, name: str, **setup) -> tuple:
    """A volume whose file `name` lives only in the bucket (NVMe wiped, fresh mount)."""
    volume = make_s3_volume(endpoint, bucket, **setup)
    volume.mount()
    (volume.path / "block").mkdir()
    data = os.urandom(BLOCKS * BLOCK)
    (volume.path / name).write_bytes(data)
    sync_wait(volume.path)
    volume.reload_from_s3()
    return volume, data


def s3_read(volume) -> tuple[int, int]:
    tier = status(volume.path)["tiers"]["s3"]
    return tier["hits"], tier["bytes_read"]


def test_sparse_random_pages_fetch_one_chunk_each(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "index.bin")
    jumps = [1, 7, 3]  # never the same or the next block: a random reader, in few of the file's blocks
    offsets = [b * BLOCK + (b * 37 % (BLOCK // PAGE)) * PAGE for b in jumps]
    got = random_page_reads(volume.path / "index.bin", offsets)
    assert got == [data[o:o + PAGE] for o in offsets]
    assert s3_read(volume) == (len(offsets), len(offsets) * CHUNK), "one chunk per read, never a block"


def broad_reads(path, data: bytes) -> list[int]:
    """Reads a page of 8 distinct blocks, as a random reader does; the 4th makes it a broad one.
    The blocks read, in order."""
    jumps = [1, 7, 3, 9, 5, 11, 2, 8]
    offsets = [b * BLOCK + 3 * CHUNK + 100 for b in jumps]
    assert random_page_reads(path, offsets) == [data[o:o + PAGE] for o in offsets]
    return jumps


def assert_local_reads(volume, path, data: bytes, blocks: list[int]) -> None:
    before = s3_read(volume)
    offsets = [b * BLOCK + 9 * CHUNK for b in blocks]
    assert random_page_reads(path, offsets) == [data[o:o + PAGE] for o in offsets]
    assert s3_read(volume) == before, "blocks fetched whole are read locally"


def test_random_pages_spread_over_the_file_fetch_all_of_it(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "broad.bin")
    path = volume.path / "broad.bin"
    broad_reads(path, data)
    wait_for(lambda: s3_read(volume)[1] >= BLOCKS * BLOCK, "the whole file to be fetched")
    wait_for(lambda: status(volume.path)["readahead"]["in_flight"] == 0, "the fetches to end")
    assert_local_reads(volume, path, data, list(range(BLOCKS)))


def test_a_file_too_big_to_warm_fetches_the_blocks_touched_once_reads_are_broad(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "broad.bin", nvme=f"{2 * BLOCKS * BLOCK >> 20}MiB")
    path = volume.path / "broad.bin"
    jumps = broad_reads(path, data)
    wait_for(lambda: s3_read(volume)[1] >= 5 * BLOCK, "the blocks touched from the 4th on to be fetched whole")
    assert_local_reads(volume, path, data, jumps[3:])
    before = s3_read(volume)
    early = [b * BLOCK + 9 * CHUNK for b in jumps[:3]]
    assert random_page_reads(path, early) == [data[o:o + PAGE] for o in early]
    assert s3_read(volume)[0] > before[0], "blocks read before the reader was seen to be broad stay in S3"


def test_a_block_read_often_is_fetched_whole_and_then_served_locally(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "hot.bin")
    path = volume.path / "hot.bin"
    hot = 5 * BLOCK
    # three chunks of one block, with jumps elsewhere between them (else the reads would be sequential)
    offsets = [hot + 100, 9 * BLOCK, hot + CHUNK + 100, 1 * BLOCK, hot + 2 * CHUNK + 100]
    assert random_page_reads(path, offsets) == [data[o:o + PAGE] for o in offsets]
    wait_for(lambda: s3_read(volume)[1] == 5 * CHUNK + BLOCK, "the hot block to be fetched whole")
    before = s3_read(volume)
    last = hot + BLOCK - PAGE
    assert random_page_reads(path, [last]) == [data[last:last + PAGE]]
    assert s3_read(volume) == before, "the promoted block is read locally"
    assert status(volume.path)["tiers"]["ram"]["hits"] >= 1


def test_a_block_rule_fetches_whole_blocks(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "block/data.bin",
                             rules=[{"path": "/block/**", "fetch": "block"}])
    offsets = [2 * BLOCK + 10 * PAGE, 7 * BLOCK + 3 * PAGE]
    assert random_page_reads(volume.path / "block/data.bin", offsets) == [data[o:o + PAGE] for o in offsets]
    assert s3_read(volume) == (2, 2 * BLOCK)
