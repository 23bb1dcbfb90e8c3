"""NVMe segments: large records bypass the page cache (O_DIRECT) and share pages with
their buffered neighbours, in the one format a rebuild reads."""

import errno
import logging
import os
import random

import pytest

from aifs.tiers import segments
from aifs.tiers.direct import DIRECT_MIN, PAGE, AlignedScratch, DirectAppender
from aifs.tiers.segments import HEADER, SegmentLog

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


def takes_o_direct(directory) -> bool:
    path = directory / "probe"
    path.touch()
    try:
        appender = DirectAppender.open(path)
        try:
            os.pwritev(appender.fd, [AlignedScratch().view(PAGE)], 0)
        finally:
            appender.close()
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    finally:
        path.unlink()
    return True


def test_large_records_bypass_the_page_cache(tmp_path):
    if not takes_o_direct(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT")
    log = SegmentLog(tmp_path, bypass_cache=True)
    small = log.append(1, payload(1, 5000))
    assert log.read_cached(small) == payload(1, 5000)
    large = log.append(2, payload(2, DIRECT_MIN))
    assert log.read_cached(large) is None, "a large record was copied into the page cache"
    (segment,) = tmp_path.glob("seg-*.log")
    with open(segment, "rb", buffering=0) as f:  # its header's page is, for set_live and kill
        assert os.preadv(f.fileno(), [bytearray(HEADER.size)], large.header_offset, os.RWF_NOWAIT) == HEADER.size
    assert log.read(large) == payload(2, DIRECT_MIN)
    log.close()


def test_large_records_read_whole_stay_out_of_the_page_cache(tmp_path):
    if not takes_o_direct(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT")
    log = SegmentLog(tmp_path, bypass_cache=True)
    first, second = log.append(1, payload(1, DIRECT_MIN + 5)), log.append(2, payload(2, DIRECT_MIN))
    log.set_live(second)  # a dirty header page inside the record's first page
    buf = bytearray()
    log.read_into(second, buf)
    assert buf == payload(2, DIRECT_MIN)
    log.read_into(first, buf)
    assert buf == payload(1, DIRECT_MIN + 5)
    assert log.read_cached(first) is None and log.read_cached(second) is None, \
        "a record read whole was copied into the page cache"
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
    if not takes_o_direct(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT")
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
    assert buf == payload(1, DIRECT_MIN) and log.read_cached(first) is None, "O_DIRECT was turned off"
    assert not [r for r in caplog.records if "refuses O_DIRECT" in r.message]
    log.close()
