"""NVMe segments: large records bypass the page cache (O_DIRECT) and share pages with
their buffered neighbours, in the one format a rebuild reads; a damaged header costs no
record that can be verified or recovered, and a read-only log changes nothing."""

import errno
import logging
import os
import random
import time
from functools import partial

import pytest
from helpers import cached_pages

from aifs.tiers import records, segments
from aifs.tiers.checksum import checksum
from aifs.tiers.direct import DIRECT_MIN, PAGE, WINDOW, AlignedScratch, DirectAppender
from aifs.tiers.segments import HEADER, Location, SegmentLog

# buffered and direct records in turn, ending anywhere in a page
SIZES = [100, DIRECT_MIN, 5000, DIRECT_MIN + 123, PAGE - HEADER.size, 3 * DIRECT_MIN + 7, 1, DIRECT_MIN]


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def test_mixed_records_read_back_and_survive_a_rebuild(tmp_path):
    log = SegmentLog(tmp_path, bypass_cache=True)
    where = {i: log.append(i, payload(i, size), staged=i % 2 == 0) for i, size in enumerate(SIZES)}
    assert all(log.read(where[i]) == payload(i, size) for i, size in enumerate(SIZES))
    log.set_live(where[0])
    log.kill(where[1])
    late = len(SIZES)
    where[late] = log.append(late, [payload(late, 7), payload(late + 1, DIRECT_MIN)])  # parts, gathered
    log.close()

    again = SegmentLog(tmp_path, bypass_cache=True)
    found = {block_id: (location, staged) for block_id, location, staged in again.rebuild()}
    assert sorted(found) == sorted(set(where) - {1})
    assert {b for b, (_, staged) in found.items() if staged} == {2, 4, 6}
    for i, size in enumerate(SIZES):
        if i != 1:
            assert again.read(found[i][0]) == payload(i, size), f"record {i} ({size} bytes) changed"
    assert again.read(found[late][0]) == payload(late, 7) + payload(late + 1, DIRECT_MIN)
    buf = bytearray()  # whole records, as an upload reads them: large ones around the page cache
    for i, size in enumerate(SIZES):
        if i != 1:
            again.read_into(found[i][0], buf)
            assert buf == payload(i, size), f"record {i} ({size} bytes) read whole changed"
    (segment,) = tmp_path.glob("seg-*.log")
    records = sum(HEADER.size + size for size in SIZES) + HEADER.size + 7 + DIRECT_MIN
    assert segment.stat().st_size == records, "the zeros after the last direct append were not cut"


def bypasses_page_cache(directory) -> bool:
    """Does an O_DIRECT write here leave the page cache alone? Some file systems refuse
    O_DIRECT, and a memory-backed one (tmpfs) takes it but holds every page in memory anyway."""
    path = directory / "probe"
    path.touch()
    try:
        appender = DirectAppender.open(path)
        try:
            os.pwritev(appender.fd, [AlignedScratch().view(PAGE)], 0)
            return cached_pages(appender.fd) == 0
        finally:
            appender.close()
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    finally:
        path.unlink()


NO_BYPASS = "the file system of {} refuses O_DIRECT or keeps its pages in memory anyway"


def assert_out_of_page_cache(segment, location) -> None:
    """Almost none of the pages wholly inside the record are in the page cache (the kernel
    may keep a few). Counted with cachestat: a probing read, even with RWF_NOWAIT, can
    pull the pages in."""
    first = -(-location.offset // PAGE) * PAGE
    end = (location.offset + location.length) // PAGE * PAGE
    pages = (end - first) // PAGE
    with open(segment, "rb", buffering=0) as f:
        cached = cached_pages(f.fileno(), first, end - first)
    assert cached < pages // 10, f"{cached} of the record's {pages} pages were copied into the page cache"


def test_large_records_bypass_the_page_cache(tmp_path):
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    log = SegmentLog(tmp_path, bypass_cache=True)
    small = log.append(1, payload(1, 5000))
    assert log.read_cached(small) == payload(1, 5000)
    large = log.append(2, payload(2, DIRECT_MIN))
    (segment,) = tmp_path.glob("seg-*.log")
    assert_out_of_page_cache(segment, large)
    assert header_cached_soon(segment, large)  # its header's page is read in, for set_live and kill
    assert log.read(large) == payload(2, DIRECT_MIN)
    log.close()


# (offset in its page where the run starts, the sizes of its parts): runs in one window, over
# several, ending a page short of a window's end, on it, and a page past it
WINDOW_RUNS = [(0, [5000]), (123, [WINDOW, 77, 2 * WINDOW + 1]), (0, [WINDOW - PAGE - 10]),
               (PAGE - 1, [WINDOW - PAGE + 1]), (17, [3, WINDOW - 20 + PAGE]), (9, [1])]


@pytest.mark.parametrize("run", range(len(WINDOW_RUNS)))
def test_direct_appends_through_the_window_write_exactly_their_bytes(tmp_path, run):
    """Each run is appended after the one before it (the previous page's bytes kept in
    memory or read back), through one window of scratch memory however long it is."""
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    path = tmp_path / "segment"
    path.write_bytes(payload(-1, WINDOW_RUNS[run][0]))
    expected = bytearray(path.read_bytes())
    appender, scratch, buffered = DirectAppender.open(path), AlignedScratch(), os.open(path, os.O_RDONLY)
    try:
        for seed, (_, sizes) in enumerate(WINDOW_RUNS[run:]):
            parts = [payload(seed * 10 + i, size) for i, size in enumerate(sizes)]
            appender.append(partial(os.pread, buffered), len(expected), parts, scratch)
            expected += b"".join(parts)
            if seed == 1:
                appender.forget_from(0)  # the next run reads its page's head back from the file
    finally:
        appender.close()
        os.close(buffered)
    assert path.read_bytes()[:len(expected)] == expected


def header_cached_soon(segment, location: Location, tries: int = 100) -> bool:
    """Whether the record's header comes into the page cache (read in the background),
    counted with cachestat as assert_out_of_page_cache counts, so as not to pull it in."""
    with open(segment, "rb", buffering=0) as f:
        for _ in range(tries):
            if cached_pages(f.fileno(), location.header_offset, HEADER.size):
                return True
            time.sleep(0.01)
    return False


def test_records_appended_in_one_run_read_back_and_survive_a_rebuild(tmp_path):
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    log = SegmentLog(tmp_path, bypass_cache=True)
    before = log.append(1, payload(1, 5000))
    run = [(10 + i, [payload(10 + i, 3000 + 7919 * i)]) for i in range(20)]
    locations = log.append_run(run, around_cache=True)
    assert len(locations) == 20
    after = log.append(2, payload(2, 100))
    (segment,) = tmp_path.glob("seg-*.log")
    for location in locations:
        if location.length >= 16 * PAGE:  # enough pages wholly inside the record to count
            assert_out_of_page_cache(segment, location)
    assert all(header_cached_soon(segment, location) for location in locations)
    expected = {1: payload(1, 5000)} | {b: parts[0] for b, parts in run} | {2: payload(2, 100)}
    assert [log.read(loc) for loc in (before, *locations, after)] == list(expected.values())
    log.close()
    reopened = SegmentLog(tmp_path, bypass_cache=True)
    assert {block_id: reopened.read(loc) for block_id, loc, _ in reopened.rebuild()} == expected
    reopened.close()


def test_a_run_stops_at_the_segment_end(tmp_path):
    log = SegmentLog(tmp_path, segment_bytes=64 << 10)
    run = [(i, [payload(i, 10_000)]) for i in range(10)]
    first = log.append_run(run)
    assert 0 < len(first) < 10 and len({loc.segment for loc in first}) == 1
    rest = log.append_run(run[len(first):])
    assert rest[0].segment != first[0].segment
    assert [log.read(loc) for loc in first + rest] == [parts[0] for _, parts in run[:len(first + rest)]]
    log.close()


def test_large_records_read_whole_stay_out_of_the_page_cache(tmp_path):
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    log = SegmentLog(tmp_path, bypass_cache=True)
    first, second = log.append(1, payload(1, DIRECT_MIN + 5)), log.append(2, payload(2, DIRECT_MIN))
    log.set_live(second)  # a dirty header page inside the record's first page
    buf = bytearray()
    log.read_into(second, buf)
    assert buf == payload(2, DIRECT_MIN)
    assert log.read(first) == payload(1, DIRECT_MIN + 5)  # a demand read of a whole block
    (segment,) = tmp_path.glob("seg-*.log")
    assert_out_of_page_cache(segment, first)
    assert_out_of_page_cache(segment, second)
    assert log.read(first, 7, 100) == payload(1, DIRECT_MIN + 5)[7:107]  # a range: through the cache
    log.close()


def test_a_log_that_keeps_the_page_cache_appends_through_it(tmp_path):
    log = SegmentLog(tmp_path)
    large = log.append(1, payload(1, DIRECT_MIN))
    assert log.read_cached(large) == payload(1, DIRECT_MIN)
    log.close()


def test_a_file_system_without_o_direct_gets_buffered_appends(tmp_path, monkeypatch, caplog):
    def refuse(path):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(segments.DirectAppender, "open", staticmethod(refuse))
    log = SegmentLog(tmp_path, bypass_cache=True)
    with caplog.at_level(logging.WARNING, logger=segments.__name__):
        first = log.append(1, payload(1, DIRECT_MIN))
        second = log.append(2, payload(2, DIRECT_MIN))
        buf = bytearray()
        log.read_into(second, buf)
    assert log.read_cached(first) == payload(1, DIRECT_MIN) and log.read(second) == payload(2, DIRECT_MIN)
    assert buf == payload(2, DIRECT_MIN)
    assert len([r for r in caplog.records if "refuses O_DIRECT" in r.message]) == 1
    log.close()


def test_a_segment_cut_short_under_a_large_record_is_an_io_error(tmp_path, caplog):
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    log = SegmentLog(tmp_path, bypass_cache=True)
    first, second = log.append(1, payload(1, DIRECT_MIN)), log.append(2, payload(2, DIRECT_MIN))
    (segment,) = tmp_path.glob("seg-*.log")
    os.truncate(segment, second.offset + DIRECT_MIN // 2 + 100)  # damage from outside
    buf = bytearray()
    with caplog.at_level(logging.WARNING, logger=segments.__name__):
        with pytest.raises(OSError) as cut:
            log.read_into(second, buf)
        log.read_into(first, buf)
    assert cut.value.errno == errno.EIO
    assert buf == payload(1, DIRECT_MIN)
    assert_out_of_page_cache(segment, first)
    assert not [r for r in caplog.records if "refuses O_DIRECT" in r.message]
    log.close()


# -- damaged records ---------------------------------------------------------------------------
# A flipped header byte must not cost the records after it: the scan stops there, and settle()
# walks on, trusting what verifies, recovering what the owner still needs.

BLOCK = 3000


def open_log(root, read_only=False) -> tuple[SegmentLog, dict]:
    log = SegmentLog(root, read_only=read_only)
    return log, {block_id: location for block_id, location, _ in log.rebuild()}


def flip(path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def sums(*block_ids: int, size: int = BLOCK) -> dict[int, int]:
    return {b: checksum(payload(b, size)) for b in block_ids}


def verifier(log: SegmentLog, known: dict[int, int]):
    """What an owner does with a record found past damage: its bytes against the checksum it knows."""
    return lambda found: known.get(found.block_id) == checksum(log.read(found.location))


def write_blocks(root, *block_ids: int, size: int = BLOCK) -> tuple[dict, object]:
    log = SegmentLog(root)
    where = {b: log.append(b, payload(b, size)) for b in block_ids}
    log.close()
    (segment,) = root.glob("seg-*.log")
    return where, segment


def test_a_flipped_byte_in_a_middle_header_costs_no_record(tmp_path):
    where, segment = write_blocks(tmp_path, 1, 2, 3)
    flip(segment, where[2].header_offset + 9)  # in the block id
    log, found = open_log(tmp_path)
    assert sorted(found) == [1] and log.damaged
    wanted = sums(1, 2, 3)
    salvage = log.settle(verifier(log, wanted), wanted, {}, found)
    assert [f.block_id for f in salvage.recovered] == [2] and not salvage.regions
    assert [f.block_id for f in salvage.records] == [3], "the record after the damage was lost"
    log.rewrite_header(salvage.recovered[0])
    log.close()
    again, found = open_log(tmp_path)
    assert sorted(found) == [1, 2, 3] and not again.damaged
    assert all(again.read(found[b]) == payload(b, BLOCK) for b in (1, 2, 3))
    again.close()


def test_a_damaged_record_nobody_needs_becomes_a_dead_one(tmp_path):
    """Block 2 is clean (the durable tier has it): its bytes are given up, block 3 verifies."""
    where, segment = write_blocks(tmp_path, 1, 2, 3)
    flip(segment, where[2].header_offset)  # the magic
    log, found = open_log(tmp_path)
    known = sums(3)
    salvage = log.settle(verifier(log, known), {}, {}, found)
    assert [f.block_id for f in salvage.records] == [3] and not salvage.recovered
    (region,) = salvage.regions
    assert (region.start, region.end) == (where[2].header_offset, where[3].header_offset)
    assert region.says is None or region.says == (2, BLOCK)
    assert log.neutralise(region) == "marked dead"
    log.close()
    again, found = open_log(tmp_path)
    assert sorted(found) == [1, 3] and not again.damaged
    assert again.read(found[3]) == payload(3, BLOCK)
    again.close()


def test_a_flipped_byte_in_the_last_header(tmp_path):
    where, segment = write_blocks(tmp_path, 1, 2, 3)
    flip(segment, where[3].header_offset + 20)  # in the length
    log, found = open_log(tmp_path)
    assert sorted(found) == [1, 2] and log.damaged
    wanted = sums(3)
    salvage = log.settle(verifier(log, wanted), wanted, {}, found)
    assert [(f.block_id, f.location) for f in salvage.recovered] == [(3, where[3])]
    log.close()

    flip(segment, where[3].header_offset + 4)  # the state byte too: an unknown state
    log, found = open_log(tmp_path)
    salvage = log.settle(verifier(log, {}), {}, {}, found)  # nobody needs block 3: cut off
    (region,) = salvage.regions
    assert region.end == segment.stat().st_size
    assert log.neutralise(region) == "cut off"
    assert segment.stat().st_size == where[3].header_offset
    log.close()


def forged(block_id: int, length: int) -> bytes:
    """A sound header, as a user may write one into a file."""
    return records.pack_header(block_id, length, records.LIVE)


def test_a_forged_header_inside_a_file_is_harmless(tmp_path):
    """A file's bytes hold a header naming block 1 whose record would swallow block 3's header.
    While headers are sound it is never looked at; past a damaged one it verifies as nothing,
    so it neither replaces block 1's copy nor hides block 3."""
    log = SegmentLog(tmp_path)
    log.append(1, payload(1, BLOCK))
    lure = payload(2, 100) + forged(1, 2 * BLOCK) + payload(2, BLOCK)
    second = log.append(2, lure)
    third = log.append(3, payload(3, BLOCK))
    log.close()
    (segment,) = tmp_path.glob("seg-*.log")

    log, found = open_log(tmp_path)
    assert sorted(found) == [1, 2, 3] and not log.damaged
    log.close()

    flip(segment, second.header_offset + 9)
    log, found = open_log(tmp_path)
    known = sums(1, 3)
    salvage = log.settle(verifier(log, known), {3: known[3]}, {}, found)
    assert [f.block_id for f in salvage.records] == [3] and not salvage.recovered
    (region,) = salvage.regions
    assert (region.start, region.end) == (second.header_offset, third.header_offset)
    log.neutralise(region)
    log.close()
    again, found = open_log(tmp_path)
    assert sorted(found) == [1, 3]
    assert again.read(found[1]) == payload(1, BLOCK) and again.read(found[3]) == payload(3, BLOCK)
    again.close()


def test_a_forged_header_is_not_taken_for_a_wanted_block_it_names(tmp_path):
    """The lure names block 3, which the owner needs: its bytes do not match block 3's
    checksum, so the real record after it is the one found."""
    log = SegmentLog(tmp_path)
    first = log.append(1, b"x" * 50 + forged(3, BLOCK) + payload(9, BLOCK))
    log.append(3, payload(3, BLOCK))
    log.close()
    (segment,) = tmp_path.glob("seg-*.log")
    flip(segment, first.header_offset + 1)
    log, found = open_log(tmp_path)
    wanted = sums(3)
    salvage = log.settle(verifier(log, wanted), wanted, {}, found)
    (record,) = salvage.records
    assert record.block_id == 3 and log.read(record.location) == payload(3, BLOCK)
    log.close()


def test_a_torn_tail_is_cut_off_but_not_when_read_only(tmp_path):
    where, segment = write_blocks(tmp_path, 1, 2)
    os.truncate(segment, where[2].offset + BLOCK // 2)
    log, found = open_log(tmp_path, read_only=True)
    assert sorted(found) == [1] and not log.damaged
    log.close()
    assert segment.stat().st_size == where[2].offset + BLOCK // 2, "a read-only scan cut the file"
    log, found = open_log(tmp_path)
    assert sorted(found) == [1] and not log.damaged
    assert segment.stat().st_size == where[2].header_offset
    log.close()


def test_zeros_after_a_direct_append_are_no_damage(tmp_path):
    if not bypasses_page_cache(tmp_path):
        pytest.skip(NO_BYPASS.format(tmp_path))
    log = SegmentLog(tmp_path, bypass_cache=True)
    large = log.append(1, payload(1, DIRECT_MIN + 5))
    log.close()
    (segment,) = tmp_path.glob("seg-*.log")
    assert segment.stat().st_size % PAGE == 0 and segment.stat().st_size > large.end
    log, found = open_log(tmp_path, read_only=True)
    assert list(found) == [1] and not log.damaged
    log.close()
    assert segment.stat().st_size % PAGE == 0
    log, found = open_log(tmp_path)
    assert list(found) == [1] and not log.damaged and segment.stat().st_size == large.end
    log.close()


def set_byte(path, offset: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] = value
    path.write_bytes(bytes(raw))


def test_a_read_only_log_changes_nothing(tmp_path):
    log, found = open_log(tmp_path / "absent", read_only=True)
    assert found == {} and not (tmp_path / "absent").exists()
    with pytest.raises(OSError) as refused:
        log.append(1, b"data")
    assert refused.value.errno == errno.EROFS
    log.close()
    where, segment = write_blocks(tmp_path, 1)
    set_byte(segment, where[1].header_offset + records.STATE_OFFSET, records.DEAD)
    log, found = open_log(tmp_path, read_only=True)
    assert found == {} and segment.exists(), "a read-only scan unlinked a segment with nothing live"
    log.close()
    log, found = open_log(tmp_path)
    assert found == {} and not segment.exists()
    log.close()


def old_segment(root, blocks: dict[int, bytes]) -> dict[int, Location]:
    """A segment as written before headers had a checksum."""
    raw, where = bytearray(), {}
    for block_id, data in blocks.items():
        raw += records.OLD_HEADER.pack(records.OLD_MAGIC, records.LIVE, block_id, len(data))
        where[block_id] = Location(1, len(raw), len(data), records.OLD_HEADER.size)
        raw += data
    root.mkdir(parents=True, exist_ok=True)
    (root / "seg-00000001.log").write_bytes(bytes(raw))
    return where


def test_old_segments_are_still_read_and_mended(tmp_path):
    where = old_segment(tmp_path, {b: payload(b, BLOCK) for b in (1, 2, 3)})
    log, found = open_log(tmp_path)
    assert found == where and all(log.read(found[b]) == payload(b, BLOCK) for b in (1, 2, 3))
    log.kill(found[1])
    new = log.append(4, payload(4, BLOCK))  # a new segment, in the new layout
    log.close()
    assert new.segment == 2 and new.header == HEADER.size

    flip(tmp_path / "seg-00000001.log", where[2].header_offset + 1)  # old headers: no checksum, a magic
    log, found = open_log(tmp_path)
    assert sorted(found) == [4] and log.damaged
    wanted = sums(2, 3)
    salvage = log.settle(verifier(log, wanted), wanted, {}, found)
    assert [(f.block_id, f.location) for f in salvage.recovered] == [(2, where[2])]
    assert [f.block_id for f in salvage.records] == [3]
    log.rewrite_header(salvage.recovered[0])
    log.close()
    again, found = open_log(tmp_path)
    assert sorted(found) == [2, 3, 4] and not again.damaged
    assert found[2] == where[2] and again.read(found[2]) == payload(2, BLOCK)
    again.close()


# 200 records of 1,000 bytes: about 200 KB in windows of 64 KiB; 8 records of 1 MiB: the
# first window, then each header alone
@pytest.mark.parametrize("size, most_reads, most_bytes", [(1000, 8, 8 * (64 << 10)),
                                                          ((1 << 20), 9, (64 << 10) + 8 * HEADER.size)])
def test_a_rebuild_reads_small_records_headers_many_at_once_and_large_ones_alone(
        tmp_path, monkeypatch, size, most_reads, most_bytes):
    log = SegmentLog(tmp_path)
    count = 200 if size < 4096 else 8
    where = {i: log.append(i, payload(i, size)) for i in range(count)}
    log.close()
    reads = []
    real_pread = os.pread

    def pread(fd, length, offset):
        data = real_pread(fd, length, offset)
        reads.append(len(data))
        return data

    monkeypatch.setattr(segments.os, "pread", pread)
    again, found = open_log(tmp_path)
    monkeypatch.undo()
    assert found == where
    assert len(reads) <= most_reads and sum(reads) <= most_bytes, f"{len(reads)} reads of {sum(reads)} bytes"
    again.close()
