"""Large-file workloads: streaming bandwidth and small random reads on one big file."""

import os
import random
import time
from functools import partial

from aifs.bench.fileio import expect_size, read_sequential, write_synced
from aifs.bench.measure import GiB, KiB, MiB, Stopwatch, mib_per_second, percentile
from aifs.bench.workload import Context, Result, Workload

FILE_SIZE = 1 * GiB
IO_SIZE = 4 * MiB
RANDREAD_SIZE = 4 * KiB
RANDREADS = 20_000
SEED = 2  # the same offsets on every path


def file_path(ctx: Context) -> str:
    """Where the big file is, in the workdir."""
    return os.path.join(ctx.workdir, "big.bin")


def write_seq(ctx: Context) -> list[Result]:
    """Write the big file in IO_SIZE writes; the time runs until fsync and close return."""
    size = ctx.scaled(FILE_SIZE)
    chunk = memoryview(os.urandom(min(IO_SIZE, size)))
    with Stopwatch() as watch:
        write_synced(file_path(ctx), size, chunk)
    return [Result(mib_per_second(size, watch.ns), "MiB/s")]


def read_seq(ctx: Context, cold: bool) -> list[Result]:
    """Read the big file front to back, from a cold cache or straight after the cold read."""
    size = ctx.scaled(FILE_SIZE)
    note = ctx.drop_caches() if cold else None
    with Stopwatch() as watch:
        got = read_sequential(file_path(ctx), IO_SIZE)
    expect_size(file_path(ctx), got, size)
    return [Result(mib_per_second(size, watch.ns), "MiB/s", note)]


def _pread_ns(fd: int, offset: int) -> int:
    """One pread's latency; perf_counter_ns inline, as a context manager would add its own cost."""
    start = time.perf_counter_ns()
    os.pread(fd, RANDREAD_SIZE, offset)
    return time.perf_counter_ns() - start


def randread(ctx: Context) -> list[Result]:
    """Aligned random preads on one fd from a cold cache: the latency a sample lookup sees."""
    pages = max(1, ctx.scaled(FILE_SIZE) // RANDREAD_SIZE)
    rng = random.Random(SEED)
    offsets = [rng.randrange(pages) * RANDREAD_SIZE for _ in range(ctx.scaled(RANDREADS))]
    note = ctx.drop_caches()
    fd = os.open(file_path(ctx), os.O_RDONLY)
    try:
        latencies = [_pread_ns(fd, offset) for offset in offsets]
    finally:
        os.close(fd)
    return [Result(percentile(latencies, p) / 1e3, "µs", note, f"p{p}") for p in (50, 99)]


WORKLOADS = [
    Workload("write-seq", write_seq),
    Workload("read-seq-cold", partial(read_seq, cold=True), requires=("write-seq",)),
    Workload("read-seq-warm", partial(read_seq, cold=False), requires=("read-seq-cold",)),
    Workload("randread", randread, requires=("write-seq",)),
]
