"""Readahead: the window grows on sequential reads, collapses on random ones, honours its cap."""

from __future__ import annotations

import os

from aifs.vfs.readahead import Readahead
from tests.tiering.conftest import MiB, read_uncached

BS = 1 << 20


def test_window_doubles_while_sequential_up_to_the_cap():
    ra = Readahead(BS, limit=8 * BS)
    fetched = []
    for i in range(12):
        fetched.append(list(ra.access(i * BS, (i + 1) * BS, 100)))
    assert [r[-1] for r in fetched[:5] if r] == [1, 3, 6, 11, 12]
    assert all(len(r) <= 8 for r in fetched)
    assert max(r[-1] for r in fetched) == 11 + 8  # never more than the cap beyond the reader


def test_blocks_that_found_no_prefetch_slot_are_asked_for_on_the_next_read():
    ra = Readahead(BS, limit=8 * BS)
    assert list(ra.access(0, BS, 100)) == [1]
    assert list(ra.access(BS, 2 * BS, 100)) == [2, 3]
    ra.retry_from(3)  # the prefetcher was full: block 3 was not started
    assert list(ra.access(2 * BS, 2 * BS + 4096, 100)) == [3, 4, 5, 6]  # 3 again, the window now 4
    assert list(ra.access(2 * BS + 4096, 3 * BS, 100)) == []


def test_reads_within_a_block_do_not_grow_the_window():
    ra = Readahead(BS, limit=16 * BS)
    assert list(ra.access(0, 128 << 10, 100)) == [1]
    for k in range(1, 8):
        assert list(ra.access(k * (128 << 10), (k + 1) * (128 << 10), 100)) == []
    assert ra.window == 1


def test_random_access_collapses_the_window():
    ra = Readahead(BS, limit=16 * BS)
    for i in range(5):
        ra.access(i * BS, (i + 1) * BS, 100)
    assert ra.window == 16
    assert list(ra.access(50 * BS, 50 * BS + 4096, 100)) == []
    assert ra.window == 0
    assert list(ra.access(50 * BS + 4096, 52 * BS, 100)) == [52]  # the pattern resumes from one block


def test_a_random_reader_landing_in_the_next_block_stays_random():
    ra = Readahead(BS, limit=16 * BS)
    assert list(ra.access(5 * BS + 4096, 5 * BS + 8192, 100)) == []
    assert list(ra.access(6 * BS + BS // 2, 6 * BS + BS // 2 + 4096, 100)) == [], "far from where it ended"
    assert ra.window == 0


def test_a_random_reader_landing_just_ahead_of_its_last_read_stays_random():
    ra = Readahead(BS, limit=16 * BS)
    ra.access(40 * BS, 40 * BS + 4096, 100)
    assert list(ra.access(41 * BS - 8192, 41 * BS - 4096, 100)) == [], "near by chance, not a stream"
    assert ra.window == 0


def test_reads_a_little_out_of_order_are_still_sequential():
    ra = Readahead(BS, limit=16 * BS)
    ra.access(0, 128 << 10, 100)
    ra.access(256 << 10, 384 << 10, 100)  # kernel readahead requests arriving out of order
    ra.access(128 << 10, 256 << 10, 100)
    assert ra.window == 1 and list(ra.access(BS, 2 * BS, 100)) == [2, 3]


def test_no_fetch_past_the_end_or_with_a_zero_cap():
    ra = Readahead(BS, limit=16 * BS)
    assert list(ra.access(0, BS, 2)) == [1]
    assert list(ra.access(BS, 2 * BS, 2)) == []
    off = Readahead(BS, limit=0)
    assert [list(off.access(i * BS, (i + 1) * BS, 100)) for i in range(3)] == [[], [], []]


def test_first_read_of_a_prefetched_block_is_not_a_reuse():
    ra = Readahead(BS)
    ra.prefetched.add(7)
    assert ra.first_read(7) is True
    assert ra.first_read(7) is False


def _random_reads(path, nblocks: int, touches: int) -> None:
    """One page in each of `touches` blocks of an `nblocks` file, never two neighbours in a row."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for i in range(touches):
            block = (3 + 7 * i) % nblocks  # never two neighbours in a row
            assert len(os.pread(fd, 4096, block * BS + 100)) == 4096
    finally:
        os.close(fd)


def test_mount_reads_ahead_on_sequential_reads_only(tiered):
    volume = tiered(extra='\n[[rules]]\npath = "/capped/**"\nreadahead = "2MiB"\n')
    data = os.urandom(24 * MiB)
    (volume.path / "capped").mkdir()
    for path in (volume.path / "seq.bin", volume.path / "rand.bin", volume.path / "capped" / "c.bin"):
        path.write_bytes(data)
    volume.make_cold()

    before = volume.status()["readahead"]["blocks"]
    _random_reads(volume.path / "rand.bin", 24, touches=3)  # a sparse reader: chunks, never whole blocks
    assert volume.status()["readahead"]["blocks"] == before

    assert read_uncached(volume.path / "seq.bin") == data
    after_seq = volume.status()["readahead"]
    assert after_seq["blocks"] - before >= 20, "blocks after the first are fetched ahead, even past a full prefetcher"

    assert read_uncached(volume.path / "capped" / "c.bin") == data
    capped = volume.status()["readahead"]["blocks"] - after_seq["blocks"]
    assert 0 < capped <= 23
    assert volume.status()["readahead"]["in_flight"] == 0
