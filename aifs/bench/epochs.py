"""Training epochs on every node of a shared volume at once, and how often the dataset
crosses from S3 to do it.

A dataset is written once through the nodes, uploaded, and every node restarted cold
(nothing in RAM, NVMe or the kernel's page cache). Then every node reads the whole of it
at the same time as the others, each in an order of its own (a new one every epoch). Per
epoch: the bytes the S3 endpoint sent for the whole cluster, counted at its door
(aifs.bench.s3count), over the dataset's size; and each node's files/s and MiB/s. Clients
that each fetch for themselves cross N times in the first epoch; a cluster-wide cache,
once.
"""

import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aifs.bench.fleet import Fleet
from aifs.bench.fileio import create_file, expect_size, read_sequential
from aifs.bench.measure import MiB, mib_per_second, per_second
from aifs.bench.nodes import NodeWorkers, Span, tree, wait_until
from aifs.bench.s3count import S3Counter
from aifs.bench.workload import Result
from aifs.config.models import format_size

EPOCHS = 2
IO_SIZE = 1 * MiB
SEED = 11
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Dataset:
    """`files` files of `size` bytes dealt over `dirs` directories, read by `readers` threads
    per node: a DataLoader's workers each take the next sample, while a large file (a shard)
    is read front to back by one reader before the next."""

    name: str
    files: int
    size: int
    dirs: int
    readers: int

    def tree(self, mountpoint: Path) -> tuple[list[str], list[str]]:
        """Its directories and files, as the node mounted at `mountpoint` sees them."""
        return tree(str(mountpoint / "datasets" / self.name), self.dirs, self.files)


# -- the nodes' shares, each run in a worker process ------------------------------------------


def write_share(start_at: int, paths: list[str], size: int) -> Span:
    """Files of `size` random bytes (no two alike)."""
    wait_until(start_at)
    start = time.monotonic_ns()
    for path in paths:
        create_file(path, os.urandom(size))
    return len(paths), start, time.monotonic_ns()


def _read(path: str, size: int) -> None:
    expect_size(path, read_sequential(path, IO_SIZE), size)


def epoch_share(start_at: int, paths: list[str], size: int, threads: int) -> Span:
    """Every file read whole, in the order given, by `threads` threads."""
    with ThreadPoolExecutor(threads) as readers:
        wait_until(start_at)
        start = time.monotonic_ns()
        list(readers.map(_read, paths, [size] * len(paths)))
    return len(paths), start, time.monotonic_ns()


# -- the measurement --------------------------------------------------------------------------


def write(fleet: Fleet, workers: NodeWorkers, datasets: list[Dataset], progress: Progress) -> None:
    """The datasets, once, through all the nodes."""
    for dataset in datasets:
        progress(f"  epochs: writing {dataset.files} files of {format_size(dataset.size)}")
        _write(fleet, workers, dataset)


def measure(fleet: Fleet, workers: NodeWorkers, counter: S3Counter, datasets: list[Dataset],
            drop: Callable[[], str | None], progress: Progress) -> dict[str, Result]:
    """Every node restarted cold, then EPOCHS epochs of each dataset on every node at once."""
    fleet.restart_cold()
    drop()
    rows: dict[str, Result] = {}
    for dataset in datasets:
        for epoch in range(1, EPOCHS + 1):
            progress(f"  epochs: {dataset.name} epoch {epoch} on {len(fleet.nodes)} nodes at once")
            rows |= _epoch(fleet, workers, counter, dataset, epoch)
    return rows


def _write(fleet: Fleet, workers: NodeWorkers, dataset: Dataset) -> None:
    """The directories through the first node, the files dealt over all of them."""
    directories, _ = dataset.tree(fleet.nodes[0])
    for directory in directories:
        os.makedirs(directory)
    count = len(fleet.nodes)
    workers.at_once(write_share, [(dataset.tree(node)[1][i::count], dataset.size)
                                  for i, node in enumerate(fleet.nodes)])


def _epoch(fleet: Fleet, workers: NodeWorkers, counter: S3Counter, dataset: Dataset,
           epoch: int) -> dict[str, Result]:
    shares = []
    for i, node in enumerate(fleet.nodes):
        paths = dataset.tree(node)[1]
        random.Random(f"{SEED}-{epoch}-{i}").shuffle(paths)
        shares.append((paths, dataset.size, dataset.readers))
    before = counter.get_bytes()
    spans = workers.at_once(epoch_share, shares)
    fetched = counter.get_bytes() - before
    name = f"{dataset.name}-epoch{epoch}"
    rows = {f"{name}-s3": Result(fetched / (dataset.files * dataset.size), "x data")}
    for i, (count, start, end) in enumerate(spans, 1):
        rows[f"{name}-files-node{i}"] = Result(per_second(count, end - start), "files/s")
        rows[f"{name}-mib-node{i}"] = Result(mib_per_second(count * dataset.size, end - start), "MiB/s")
    return rows
