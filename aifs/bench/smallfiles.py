"""Small-file workloads: the metadata- and open-bound side of a training data set."""

import os
import random
import statistics
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from aifs.bench.fileio import create_file, read_small_file
from aifs.bench.measure import KiB, Stopwatch, per_second
from aifs.bench.workload import BenchError, Context, Result, Workload

FILES = 10_000
DIRS = 100
FILE_SIZE = 16 * KiB
READ_THREADS = (1, 8)
LIST_ENTRIES = 10_000
LIST_RUNS = 3
SEED = 1  # the same "random" order on every path, so paths are compared fairly


def _dirs(ctx: Context) -> list[str]:
    return [os.path.join(ctx.workdir, "small", f"d{d:03d}") for d in range(ctx.scaled(DIRS))]


def _files(ctx: Context) -> list[str]:
    """The small-file set: files dealt round-robin over the directories."""
    dirs = _dirs(ctx)
    return [os.path.join(dirs[i % len(dirs)], f"f{i:05d}") for i in range(ctx.scaled(FILES))]


def _shuffled_files(ctx: Context) -> list[str]:
    """The small files in a random order, so readahead of neighbours cannot help."""
    files = _files(ctx)
    random.Random(SEED).shuffle(files)
    return files


def create(ctx: Context) -> list[Result]:
    """Create the small-file set, each file with one write, counting the directories' mkdirs."""
    files = _files(ctx)
    data = os.urandom(ctx.scaled(FILE_SIZE))
    with Stopwatch() as watch:
        for directory in _dirs(ctx):
            os.makedirs(directory)
        for path in files:
            create_file(path, data)
    return [Result(per_second(len(files), watch.ns), "files/s")]


def _read_files(paths: list[str], size: int) -> None:
    for path in paths:
        read_small_file(path, size)


def read_back(ctx: Context, threads: int) -> list[Result]:
    """Read every small file once from a cold cache, the files dealt out over `threads` threads."""
    files = _shuffled_files(ctx)
    read = partial(_read_files, size=ctx.scaled(FILE_SIZE))
    note = ctx.drop_caches()
    with Stopwatch() as watch, ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, [files[i::threads] for i in range(threads)]))
    return [Result(per_second(len(files), watch.ns), "files/s", note)]


def stat_all(ctx: Context) -> list[Result]:
    """os.stat every small file from a cold cache: the cost of a lookup plus getattr."""
    files = _shuffled_files(ctx)
    note = ctx.drop_caches()
    with Stopwatch() as watch:
        for path in files:
            os.stat(path)
    return [Result(per_second(len(files), watch.ns), "ops/s", note)]


def _time_listdir(directory: str, entries: int) -> int:
    with Stopwatch() as watch:
        names = os.listdir(directory)
    if len(names) != entries:
        raise BenchError(f"{directory}: listed {len(names)} entries, expected {entries}")
    return watch.ns


def list_dir(ctx: Context) -> list[Result]:
    """List one large directory of empty files; the median of a few runs damps noise."""
    directory = os.path.join(ctx.workdir, "list")
    entries = ctx.scaled(LIST_ENTRIES)
    os.mkdir(directory)
    for i in range(entries):
        create_file(os.path.join(directory, f"e{i:05d}"), b"")
    runs = [_time_listdir(directory, entries) for _ in range(LIST_RUNS)]
    return [Result(statistics.median(runs) / 1e6, "ms")]


WORKLOADS = [
    Workload("create", create),
    *(
        Workload(f"read-{threads}t", partial(read_back, threads=threads), requires=("create",))
        for threads in READ_THREADS
    ),
    Workload("stat", stat_all, requires=("create",)),
    Workload("list", list_dir),
]
