"""A file warmed for a broad random reader is handed to the kernel's page cache, so its later
reads never reach the mount; and never over bytes that a write or a truncation changed."""

import os
from collections.abc import Callable

from aifs.tiers.checksum import CHUNK

from .faultproxy import FaultProxy, Faults
from .helpers_mount import BLOCK, make_s3_volume, status, wait_for
from .test_ranged_reads import BLOCKS, PAGE, cold_file, s3_read

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

BROAD = [1, 7, 3, 9]  # distinct blocks: the 4th makes the reader a broad one


def tier_hits(volume) -> int:
    return sum(tier.get("hits", 0) for tier in status(volume.path)["tiers"].values())


def random_reader(path) -> int:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd


def read_broadly(fd: int, data: bytes) -> None:
    for b in BROAD:
        offset = b * BLOCK + 3 * CHUNK + 100
        assert os.pread(fd, PAGE, offset) == data[offset:offset + PAGE]


def warming_ended(volume) -> Callable[[], bool]:
    """Every block fetched, and handed to the page cache or not."""
    return lambda: s3_read(volume)[1] >= BLOCKS * BLOCK and status(volume.path)["readahead"]["warming_files"] == 0


def test_a_warmed_file_is_read_from_the_page_cache(make_s3_volume, moto_server, bucket):
    volume, data = cold_file(make_s3_volume, moto_server.endpoint, bucket, "warm.bin")
    fd = random_reader(volume.path / "warm.bin")
    try:
        read_broadly(fd, data)
        wait_for(warming_ended(volume), "the whole file to be fetched")
        offsets = [b * BLOCK + 11 * CHUNK + 8 for b in range(BLOCKS)]
        before = tier_hits(volume)
        assert [os.pread(fd, PAGE, o) for o in offsets] == [data[o:o + PAGE] for o in offsets]
        assert tier_hits(volume) == before, "every block's pages were in the page cache"
        ahead = status(volume.path)["readahead"]
        assert (ahead["warmed_files"], ahead["page_cache_blocks"]) == (1, BLOCKS)
    finally:
        os.close(fd)


def test_writes_while_the_file_warms_are_never_covered_by_older_bytes(make_s3_volume, moto_server, bucket):
    with FaultProxy(moto_server.port, Faults()) as proxy:
        volume, data = cold_file(make_s3_volume, proxy.endpoint, bucket, "written.bin")
        path = volume.path / "written.bin"
        model = bytearray(data)
        proxy.change(Faults(stall=1.0, stall_s=0.2))  # blocks land one after another while it writes
        fd = random_reader(path)
        try:
            read_broadly(fd, data)
            with open(path, "r+b") as f:
                for b in range(BLOCKS):
                    patch = os.urandom(PAGE)
                    offset = b * BLOCK + 5 * CHUNK
                    f.seek(offset)
                    f.write(patch)
                    f.flush()
                    model[offset:offset + PAGE] = patch
                # blocks land while the new bytes are in the pages but not yet in blocks
                wait_for(warming_ended(volume), "the warming to end")
                assert os.pread(fd, len(model), 0) == bytes(model), "read while the writer has it open"
            assert os.pread(fd, len(model), 0) == bytes(model)
        finally:
            os.close(fd)
        assert path.read_bytes() == bytes(model)


def test_a_truncation_while_the_file_warms_stays_truncated(make_s3_volume, moto_server, bucket):
    with FaultProxy(moto_server.port, Faults()) as proxy:
        volume, data = cold_file(make_s3_volume, proxy.endpoint, bucket, "cut.bin")
        path = volume.path / "cut.bin"
        proxy.change(Faults(stall=1.0, stall_s=0.2))  # blocks land after the truncation
        fd = random_reader(path)
        size = BLOCKS * BLOCK // 2 + 1234
        try:
            read_broadly(fd, data)
            os.truncate(path, size)
            wait_for(warming_ended(volume), "the warming to end")
            assert os.fstat(fd).st_size == size
            assert os.pread(fd, BLOCKS * BLOCK, 0) == data[:size]
        finally:
            os.close(fd)
        assert path.stat().st_size == size and path.read_bytes() == data[:size]
