"""The metadata engines as a namespace grows: lookups, stats and memory at 100k to 10M entries.

A bench mode. For each size and each engine (RocksDB in a scratch state directory; Redis, a
server of the mode's own with its append-only file fsynced on every write), in a scratch
folder under BASE:

    bulk-create    the namespace is made through the engine itself (MetaEngine's transactions
                   on the KV seam, not through FUSE): a few thousand directories, then empty
                   files spread over them, many files to a commit (entries/s, directories included)
    lookup-*       one LOOKUP through a fresh mount: the first stat of a file whose directory the
                   kernel already knows (µs). Cold: page cache dropped and the mount new, so
                   neither the kernel nor the node caches anything; warm: the same files again
                   after the kernel dropped its dentries, the node's caches kept
    stat-*         os.stat of a path as a program makes it (µs). The mount is made with
                   attr_timeout = 0, so every stat reaches it. Cold: the path's first stat on the
                   fresh mount (its LOOKUPs too); warm: the same path again (one GETATTR)
    mount-rss      the mount process's resident memory once the samples are read (MiB)
    redis-memory   Redis' INFO used_memory (MiB)
    rocksdb-disk   the size of STATE_DIR/meta on disk (MiB)

`--entries` lists the sizes; `--scale` multiplies them and the sample counts (a smoke run).
"""

import os
import random
import re
import shutil
import stat
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from aifs.bench import caches
from aifs.bench.caches import NOT_DROPPED, CacheDropper
from aifs.bench.measure import MiB, per_second, percentile
from aifs.bench.redisproc import redis_server
from aifs.bench.scratch import BUCKET, ScratchVolume, scratch_root, table, tier
from aifs.bench.workload import BenchError, Context, Mode, Result, Results
from aifs.config.loader import load_config
from aifs.meta import keys
from aifs.meta.attrs import Inode
from aifs.meta.engine import ROOT_INO, MetaEngine
from aifs.meta.engines import open_kv
from aifs.meta.ids import IdAllocator
from aifs.meta.txn import Txn
from aifs.meta.usage import Usage
from aifs.vfs.statedir import read_holder

NAME = "meta-scale"
ENTRIES = (100_000, 1_000_000, 10_000_000)
ENGINES = ("rocksdb", "redis")
DIRS = 2_000
FILES_PER_DIR_AT_LEAST = 10  # a small namespace gets fewer directories
BATCH = 2_000  # files per commit
SAMPLES = 2_000
SEED = 11
DROP_DENTRIES = "2"  # /proc/sys/vm/drop_caches: dentries and inodes, not the page cache
_COUNT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG]?)")
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
Progress = Callable[[str], None]


def parse_entries(text: str) -> list[int]:
    """"100k,1M,10M" -> [100000, 1000000, 10000000]; ValueError naming what is wrong."""
    counts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _COUNT.fullmatch(item)
        if match is None or (count := round(float(match[1]) * _SUFFIX[match[2].lower()])) < 1:
            raise ValueError(f"{item!r} is not a count of entries; write e.g. 100000 or 100k,1M,10M")
        counts.append(count)
    if not counts:
        raise ValueError("no count of entries given; write e.g. 100k,1M,10M")
    return counts


def _short(count: int) -> str:
    for suffix, unit in (("M", 10**6), ("k", 10**3)):
        if count >= unit and count % (unit // 10) == 0:
            return f"{count / unit:g}{suffix}"
    return str(count)


@dataclass(frozen=True)
class Namespace:
    """Where each of `files` empty files lives: file i in directory i // per_dir."""

    dirs: int
    files: int

    @classmethod
    def of(cls, entries: int) -> "Namespace":
        dirs = max(1, min(DIRS, entries // FILES_PER_DIR_AT_LEAST))
        return cls(dirs, max(1, entries - dirs))

    @property
    def per_dir(self) -> int:
        return -(-self.files // self.dirs)

    @staticmethod
    def dir_name(d: int) -> str:
        return f"d{d:05d}"

    def path(self, i: int) -> tuple[str, str]:
        """File i's directory and name, relative to the root."""
        return self.dir_name(i // self.per_dir), f"f{i:08d}"


def bulk_create(engine: MetaEngine, namespace: Namespace) -> None:
    """The namespace through the engine's own transactions: each directory with
    MetaEngine.create, then the files BATCH to a commit (their inodes, their entries, their
    directories' times and the usage count, as a create writes them)."""
    directories = [engine.create(ROOT_INO, Namespace.dir_name(d).encode(), stat.S_IFDIR | 0o755, 0, 0)[0]
                   for d in range(namespace.dirs)]
    inos = IdAllocator(engine.kv, b"next_ino", ROOT_INO + 1, chunk=BATCH)
    for first in range(0, namespace.files, BATCH):
        txn = Txn(engine.kv)
        inode = Inode(stat.S_IFREG | 0o644, 0, 0, atime_ns=txn.now, mtime_ns=txn.now, ctime_ns=txn.now).encode()
        parents = set()
        last = min(namespace.files, first + BATCH)
        for i in range(first, last):
            parent = directories[i // namespace.per_dir]
            ino = inos.next()
            txn.batch.put(keys.inode(ino), inode)
            txn.batch.put(keys.dentry(parent, namespace.path(i)[1].encode()), keys.entry(ino, stat.S_IFREG))
            parents.add(parent)
        for parent in parents:
            txn.touch(parent)
        Usage.add(txn.batch, inodes=last - first)
        txn.commit()
    engine.sync()


# -- through the mount ------------------------------------------------------------------------


def _timed_stat(path: str) -> int:
    start = time.perf_counter_ns()
    os.stat(path)
    return time.perf_counter_ns() - start


def _drop_dentries() -> str | None:
    """Have the kernel forget the mount's dentries and inodes, leaving every page cached."""
    try:
        with open(caches.DROP_CACHES, "w") as control:
            control.write(DROP_DENTRIES)
        return None
    except OSError:
        return NOT_DROPPED


def _rows(prefix: str, latencies: list[int], note: str | None = None) -> dict[str, Result]:
    return {f"{prefix}-p{p}": Result(percentile(latencies, p) / 1e3, "µs", note) for p in (50, 99)}


def _latencies(mnt: Path, namespace: Namespace, samples: int, cold_note: str | None) -> dict[str, Result]:
    """Stats and lookups of random files on a fresh mount, cold then warm."""
    picks = random.Random(SEED).sample(range(namespace.files), min(namespace.files, 2 * samples))
    stat_paths = [str(mnt.joinpath(*namespace.path(i))) for i in picks[::2]]
    lookups = [mnt.joinpath(*namespace.path(i)) for i in picks[1::2]]
    stat_cold = [_timed_stat(path) for path in stat_paths]
    lookup_cold = _lookups(lookups)
    stat_warm = [_timed_stat(path) for path in stat_paths]
    warm_note = _drop_dentries()
    lookup_warm = _lookups(lookups)
    return {**_rows("lookup-cold", lookup_cold, cold_note), **_rows("lookup-warm", lookup_warm, warm_note),
            **_rows("stat-cold", stat_cold, cold_note), **_rows("stat-warm", stat_warm)}


def _lookups(paths: list[Path]) -> list[int]:
    """One LOOKUP each: the directory is statted first, untimed."""
    latencies = []
    for path in paths:
        os.stat(path.parent)
        latencies.append(_timed_stat(str(path)))
    return latencies


def _rss(pid: int | None) -> int:
    """Resident bytes of process `pid`."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, TypeError) as error:
        raise BenchError(f"cannot read the mount process's memory (pid {pid}): {error}") from error
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)[1]) * 1024


def _disk_bytes(path: Path) -> int:
    return sum(entry.stat().st_blocks * 512 for entry in path.rglob("*") if entry.is_file())


# -- the mode ---------------------------------------------------------------------------------


def _column(root: Path, engine: str, entries: int, samples: int, drop: CacheDropper,
            progress: Progress) -> dict[str, Result]:
    """One engine at one size, in a folder of its own that is removed afterwards."""
    namespace = Namespace.of(entries)
    with ExitStack() as stack:
        root.mkdir()
        stack.callback(shutil.rmtree, root, True)
        server = stack.enter_context(redis_server(root)) if engine == "redis" else None
        volume = ScratchVolume(root)
        engine_table = table("[meta]", url=server.url(0)) if server else ""
        config = volume.config("meta", tier("ram", capacity=64 * MiB), tier("nvme", capacity=256 * MiB),
                               tier("objstore"), engine_table, table("[fuse]", attr_timeout=0.0))
        progress(f"{engine}: {entries:,} entries ({namespace.dirs:,} directories) through the engine")
        start = time.monotonic_ns()
        meta = MetaEngine(open_kv(load_config(config)), volume.block)
        try:
            bulk_create(meta, namespace)
        finally:
            meta.close()
        rows = {"bulk-create": Result(per_second(namespace.dirs + namespace.files, time.monotonic_ns() - start),
                                      "entries/s")}
        progress(f"{engine}: {samples:,} lookups and stats through a fresh mount, cold and warm")
        cold_note = drop()
        with volume.mounted(config) as mnt:
            rows |= _latencies(mnt, namespace, samples, cold_note)
            rows["mount-rss"] = Result(_rss(read_holder(volume.state).pid) / MiB, "MiB")
            if server:
                rows["redis-memory"] = Result(server.used_memory() / MiB, "MiB")
            else:
                rows["rocksdb-disk"] = Result(_disk_bytes(volume.state / "meta") / MiB, "MiB")
        return rows


def run(base: str, scale: float, progress: Progress, s3_endpoint: str | None = None, bucket: str = BUCKET,
        s3_own_core: bool = False, entries: list[int] | None = None) -> Results:
    """Columns "ENGINE SIZE", smallest size first; rows as in the module's docstring."""
    if s3_endpoint is not None or s3_own_core:
        raise BenchError("--mode meta-scale keeps no file data: --s3-endpoint and --s3-own-core do not apply")
    ctx = Context(base, scale, lambda: None)
    sizes = [ctx.scaled(count) for count in entries or ENTRIES]
    samples = ctx.scaled(SAMPLES)
    drop = CacheDropper(warn=progress)
    results: Results = {}
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        for size in sizes:
            for engine in ENGINES:
                column = f"{engine} {_short(size)}"
                started = time.monotonic()
                results[column] = _column(root / column.replace(" ", "-"), engine, size, samples, drop, progress)
                progress(f"{column}: done in {time.monotonic() - started:,.0f} s")
    return results


def goals(results: Results) -> list[str]:
    """How lookups and memory grow from the smallest namespace to the largest, per engine."""
    lines = []
    for engine in ENGINES:
        columns = [name for name in results if name.startswith(engine + " ")]
        small, large = results[columns[0]], results[columns[-1]]
        memory = "redis-memory" if engine == "redis" else "rocksdb-disk"
        lines.append(
            f"{engine}, {columns[0].split()[1]} -> {columns[-1].split()[1]} entries: lookup-cold p99 "
            f"{small['lookup-cold-p99'].value:,.0f} -> {large['lookup-cold-p99'].value:,.0f} µs, lookup-warm p99 "
            f"{small['lookup-warm-p99'].value:,.0f} -> {large['lookup-warm-p99'].value:,.0f} µs, {memory} "
            f"{small[memory].value:,.0f} -> {large[memory].value:,.0f} MiB")
    return lines


MODE = Mode(NAME, "a namespace of 100k, 1M and 10M entries made through RocksDB and Redis: lookup and stat "
                  "p50/p99 through a mount with cold and warm caches, and the engines' memory", run, goals,
            options=("entries",))
