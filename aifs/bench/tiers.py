"""What the tier manager delivers, each number beside the same files in a local directory.

A bench mode (it builds its own volume: ram, nvme and an s3 tier on a moto server on
127.0.0.1 unless an endpoint is given) with these rows:

    epoch1, epoch2        the `dataloader` workload (20,000 x 100 KiB in 100 class directories,
                          8 threads, shuffled). On aifs epoch 1 finds the data only in S3 (written,
                          uploaded, NVMe wiped, caches dropped, fresh mount); epoch 2 follows warm
    epoch1-s3-gets        aifs' S3 GETs per second in epoch 1 (the tier counters), beside boto3
                          alone GETting the same objects from the same bucket with 8 threads
    read-seq-s3/nvme/ram  a 1 GiB file in 4 MiB reads: NVMe wiped (S3 only); fresh mount (NVMe,
                          RAM empty); again in that mount after dropping the page cache (RAM)
    pinned-p50/p99/p999   4 KiB preads at distinct random pages of a 256 MiB file pinned to RAM
                          (`aifs pin --tier ram`), page cache dropped, kernel readahead off

The local column reads the same files from a directory under BASE after dropping caches.
Every aifs read is checked against the mount's tier counters: a number measured on the
wrong tier is an error, never a result.
"""

import os
import random
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from aifs.bench import dataloader
from aifs.bench.caches import CacheDropper
from aifs.bench.fileio import forget_pages, pread_latencies, read_rate, write_synced
from aifs.bench.measure import GiB, KiB, MiB, per_second, percentile
from aifs.bench.scratch import (BUCKET, S3Target, ScratchVolume, aifs_cli, check_source, s3_target, scratch_root,
                                table, tier)
from aifs.bench.workload import BenchError, Context, Mode, Result, Results

NAME = "tiers"
SEQ_SIZE = 1 * GiB
PIN_SIZE = 256 * MiB
IO_SIZE = 4 * MiB
PAGE = 4 * KiB
PREADS = 20_000
PERCENTILES = {"p50": 50, "p99": 99, "p999": 99.9}
GET_THREADS = dataloader.WORKERS
SEED = 4
BOTO3_NOTE = f"boto3 alone, {GET_THREADS} threads GETting the same objects from the same bucket"

Rows = dict[str, Result]
Pair = tuple[Rows, Rows]  # aifs, local


def _size(ctx: Context, n: int) -> int:
    """n bytes at the scale, in whole pages."""
    return max(PAGE, ctx.scaled(n) // PAGE * PAGE)


class _Files:
    """The bench's files in one directory (the mount or the local one) at one scale."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.samples = dataloader.sample_paths(ctx)
        self.sample_size = ctx.scaled(dataloader.SAMPLE_SIZE)
        self.seq, self.seq_size = os.path.join(ctx.workdir, "seq.bin"), _size(ctx, SEQ_SIZE)
        self.pinned, self.pinned_size = os.path.join(ctx.workdir, "pinned.bin"), _size(ctx, PIN_SIZE)

    def write_big(self) -> None:
        """The sequential and the pinned file (the data set is laid down on its own)."""
        for path, size in ((self.seq, self.seq_size), (self.pinned, self.pinned_size)):
            write_synced(path, size, memoryview(os.urandom(min(IO_SIZE, size))))

    def offsets(self) -> list[int]:
        """Distinct random pages of the pinned file, the same on every path."""
        pages = self.pinned_size // PAGE
        count = min(self.ctx.scaled(PREADS), pages)
        return [page * PAGE for page in random.Random(SEED).sample(range(pages), count)]


def run(base: str, scale: float, progress: Callable[[str], None], s3_endpoint: str | None = None,
        bucket: str = BUCKET, s3_own_core: bool = False) -> Results:
    """Columns aifs and local; rows as the module says."""
    with ExitStack() as stack:
        root = scratch_root(stack, base, NAME)
        target = s3_target(stack, root, s3_endpoint, bucket, s3_own_core)
        bench = _Bench(root, scale, target, CacheDropper(warn=progress), progress)
        keys = bench.populate()
        aifs, local = _merge([bench.epochs(keys), bench.seq_from_s3(), bench.from_nvme_and_ram()])
        return {"aifs": aifs, "local": local}


def _merge(pairs: list[Pair]) -> Pair:
    """The rows of several measurements, in order, for each column."""
    return ({name: r for aifs, _ in pairs for name, r in aifs.items()},
            {name: r for _, local in pairs for name, r in local.items()})


class _Bench:
    """One volume and one local directory holding the same files, measured side by side."""

    def __init__(self, root: Path, scale: float, target: S3Target, drop: CacheDropper,
                 progress: Callable[[str], None]) -> None:
        self.target, self.drop, self.progress = target, drop, progress
        self.volume = ScratchVolume(root)
        self.aifs = _Files(Context(str(self.volume.mountpoint), scale, drop))
        (root / "local").mkdir()
        self.local = _Files(Context(str(root / "local"), scale, drop))
        data = len(self.aifs.samples) * self.aifs.sample_size
        big = self.aifs.seq_size + self.aifs.pinned_size
        unpacked = table("[writeback]", pack_below=0)  # one object per sample: the packing mode measures packs
        self.config = self.volume.config("tiers", tier("ram", capacity=max(data, big) + 256 * MiB),
                                         tier("nvme", capacity=2 * (data + big) + GiB), target.tier(), unpacked)

    def populate(self) -> list[str]:
        """All files on the volume and uploaded, the big ones locally too; returns the data set's S3 keys."""
        self.progress(f"writing {len(self.aifs.samples)} samples, {self.aifs.seq_size >> 20} MiB and "
                      f"{self.aifs.pinned_size >> 20} MiB files, and uploading them to S3")
        with self.volume.mounted(self.config) as mnt:
            dataloader.create_samples(self.aifs.samples, self.aifs.sample_size)
            self.volume.sync(mnt)
            keys = self.target.block_keys()  # nothing but the data set is in the bucket yet
            self.aifs.write_big()
            self.volume.sync(mnt)
        if len(keys) != len(self.aifs.samples):
            raise BenchError(f"{len(self.aifs.samples)} samples were uploaded as {len(keys)} objects")
        self.local.write_big()
        return keys

    def epochs(self, keys: list[str]) -> Pair:
        """Epoch 1 with the data set only in S3, epoch 2 warm; boto3 GETting the same objects."""
        self.progress("epochs: aifs (epoch 1 from S3)")
        self.volume.wipe_nvme()
        note = self.drop()
        size, count = self.aifs.sample_size, len(self.aifs.samples)
        with self.volume.mounted(self.config):
            before = self.volume.status()
            first = dataloader.run_epoch(self.aifs.samples, size, 1)
            after = self.volume.status()
            check_source(after, "s3", before)
            second = dataloader.run_epoch(self.aifs.samples, size, 2)
        gets = after["tiers"]["s3"]["hits"] - before["tiers"]["s3"]["hits"]
        aifs = {"epoch1": Result(per_second(count, first), "samples/s", note),
                "epoch2": Result(per_second(count, second), "samples/s"),
                "epoch1-s3-gets": Result(per_second(gets, first), "GET/s")}
        self.progress("epochs: boto3 GETs, then the local directory")
        boto3 = Result(self._boto3_gets(keys), "GET/s", BOTO3_NOTE)
        local = {r.label: r for r in dataloader.epochs(self.local.ctx)}
        return aifs, local | {"epoch1-s3-gets": boto3}

    def _boto3_gets(self, keys: list[str]) -> float:
        """GETs per second of boto3 alone, each object once, spread over GET_THREADS threads."""
        _, ns = self.target.get_each(keys, GET_THREADS)
        return per_second(len(keys), ns)

    def seq_from_s3(self) -> Pair:
        """The sequential file through a fresh mount with NVMe wiped: every block from S3."""
        self.volume.wipe_nvme()
        note = self.drop()
        with self.volume.mounted(self.config):
            return self._seq("s3", note)

    def from_nvme_and_ram(self) -> Pair:
        """One fresh mount (RAM empty): the sequential file from NVMe, again from RAM, then the pinned reads."""
        note = self.drop()
        with self.volume.mounted(self.config):
            return _merge([self._seq("nvme", note), self._seq("ram", self._drop_file(self.aifs.seq)),
                           self._pinned()])

    def _drop_file(self, path: str) -> str | None:
        """Drop the caches, and this file's pages even where dropping every cache was refused."""
        note = self.drop()
        forget_pages(path)
        return note

    def _seq(self, source: str, note: str | None) -> Pair:
        """The sequential file from `source` (checked), then the local copy after dropping caches."""
        self.progress(f"sequential read: aifs from {source}, then the local directory")
        name = f"read-seq-{source}"
        before = self.volume.status()
        aifs = read_rate(self.aifs.seq, self.aifs.seq_size, IO_SIZE)
        check_source(self.volume.status(), source, before)
        local_note = self.drop()
        local = read_rate(self.local.seq, self.local.seq_size, IO_SIZE)
        return {name: Result(aifs, "MiB/s", note)}, {name: Result(local, "MiB/s", local_note)}

    def _pinned(self) -> Pair:
        """Random 4 KiB preads of the file pinned to RAM (checked), then of the local copy."""
        self.progress("pinned random reads: aifs from RAM, then the local directory")
        aifs_cli("pin", "--tier", "ram", self.aifs.pinned)
        offsets = self.aifs.offsets()
        note = self._drop_file(self.aifs.pinned)
        before = self.volume.status()
        aifs = pread_latencies(self.aifs.pinned, offsets, PAGE)
        check_source(self.volume.status(), "ram", before)
        local_note = self.drop()
        return _percentiles(aifs, note), _percentiles(pread_latencies(self.local.pinned, offsets, PAGE), local_note)


def _percentiles(latencies: list[int], note: str | None) -> Rows:
    return {f"pinned-{name}": Result(percentile(latencies, p) / 1e3, "µs", note) for name, p in PERCENTILES.items()}


def goals(results: Results) -> list[str]:
    """Warm epochs at 5,000 samples/s, pinned reads under 200 µs at p99, S3 GETs near boto3's own rate."""
    aifs, local = results["aifs"], results["local"]
    epoch2, gets, boto3 = aifs["epoch2"].value, aifs["epoch1-s3-gets"].value, local["epoch1-s3-gets"].value
    return [f"epoch 2: {epoch2:,.0f} samples/s (goal >= 5,000), {epoch2 / local['epoch2'].value:.2f} x local",
            f"pinned 4 KiB random read p99: {aifs['pinned-p99'].value:.0f} µs (goal < 200)",
            f"epoch 1 S3 GETs: aifs {gets:,.0f}/s, boto3 alone {boto3:,.0f}/s: {gets / boto3:.2f}"]


MODE = Mode(NAME, "DataLoader epochs from S3 and warm, 1 GiB sequential reads from S3, NVMe and RAM, "
                  "random reads of a file pinned to RAM, each beside a local directory", run, goals)
