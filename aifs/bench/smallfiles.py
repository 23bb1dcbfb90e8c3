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


def shuffled_files(ctx: Context) -> list[str]:
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


def read_files(paths: list[str], size: int) -> None:
    """Open, read and close each of `paths`, files of `size` bytes, one after another."""
    for path in paths:
        read_small_file(path, size)


def _read_pass(files: list[str], size: int, threads: int) -> int:
    """Every file read once, the files dealt out over `threads` threads; the ns it took."""
    read = partial(read_files, size=size)
    with Stopwatch() as watch, ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, [files[i::threads] for i in range(threads)]))
    return watch.ns


def read_back(ctx: Context, threads: int, warm: bool = False) -> list[Result]:
    """Read every small file once, the files dealt out over `threads` threads: from a cold
    cache, or (`warm`) straight after an untimed pass, so that the caches hold them."""
    files = shuffled_files(ctx)
    size = ctx.scaled(FILE_SIZE)
    if warm:
        _read_pass(files, size, threads)
    note = None if warm else ctx.drop_caches()
    return [Result(per_second(len(files), _read_pass(files, size, threads)), "files/s", note)]


def stat_all(ctx: Context) -> list[Result]:
    """os.stat every small file from a cold cache: the cost of a lookup plus getattr."""
    files = shuffled_files(ctx)
    note = ctx.drop_caches()
    with Stopwatch() as watch:
        for path in files:
            os.stat(path)
    return [Result(per_second(len(files), watch.ns), "ops/s", note)]


def time_listdir(directory: str, entries: int) -> int:
    """The ns of one os.listdir of `directory`, which must hold `entries` names."""
    with Stopwatch() as watch:
        names = os.listdir(directory)
    if len(names) != entries:
        raise BenchError(f"{directory}: listed {len(names)} entries, expected {entries}")
    return watch.ns


def make_listing(ctx: Context, entries: int) -> str:
    """A new directory of `entries` empty files, to be listed; its path."""
    directory = os.path.join(ctx.workdir, "list")
    os.mkdir(directory)
    for i in range(entries):
        create_file(os.path.join(directory, f"e{i:05d}"), b"")
    return directory


def list_dir(ctx: Context) -> list[Result]:
    """List one large directory of empty files; the median of a few runs damps noise."""
    entries = ctx.scaled(LIST_ENTRIES)
    directory = make_listing(ctx, entries)
    runs = [time_listdir(directory, entries) for _ in range(LIST_RUNS)]
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
