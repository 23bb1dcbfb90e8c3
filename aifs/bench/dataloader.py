"""DataLoader-style epochs: a training job reading its whole data set in a new random order.

A map-style dataset of many ~100 KiB samples (images, token shards) is read once per
epoch, shuffled, by a pool of workers. Epoch 1 starts from dropped caches (on aifs:
whatever the tiers below the page cache hold); epoch 2 follows at once, warm. The
workers are threads, not torch processes, so the bench needs no torch; each reads
whole files with one open/read/close, which is what a Dataset.__getitem__ does.
"""

import os
import random
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from aifs.bench.fileio import create_file, read_small_file
from aifs.bench.measure import KiB, Stopwatch, per_second
from aifs.bench.workload import Context, Result, Workload

SAMPLES = 20_000
CLASSES = 100  # one directory per class, as in an ImageFolder data set
SAMPLE_SIZE = 100 * KiB
WORKERS = 8
EPOCHS = (1, 2)
SEED = 3  # the same shuffles on every path, so paths are compared fairly


def sample_paths(ctx: Context) -> list[str]:
    """Sample paths dealt round-robin over the class directories."""
    root = os.path.join(ctx.workdir, "dataset")
    classes = [os.path.join(root, f"c{c:03d}") for c in range(ctx.scaled(CLASSES))]
    return [os.path.join(classes[i % len(classes)], f"s{i:05d}.bin") for i in range(ctx.scaled(SAMPLES))]


def create_samples(samples: list[str], size: int) -> None:
    """Lay down the data set (untimed: only the epochs are measured)."""
    data = os.urandom(size)
    for path in samples:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        create_file(path, data)


def _worker(paths: list[str], size: int) -> None:
    for path in paths:
        read_small_file(path, size)


def run_epoch(samples: list[str], size: int, epoch: int) -> int:
    """Read every sample once in this epoch's shuffle; returns the nanoseconds it took."""
    order = samples[:]
    random.Random(SEED * 1000 + epoch).shuffle(order)
    return read_in_order(order, size)


def read_in_order(order: list[str], size: int) -> int:
    """Read every sample once, dealt over the workers in this order as a DataLoader deals
    batches; returns the nanoseconds it took."""
    read = partial(_worker, size=size)
    with Stopwatch() as watch, ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(read, [order[i::WORKERS] for i in range(WORKERS)]))
    return watch.ns


def epochs(ctx: Context) -> list[Result]:
    """Create the data set, drop caches, then time epoch 1 (cold) and epoch 2 (warm)."""
    samples = sample_paths(ctx)
    size = ctx.scaled(SAMPLE_SIZE)
    create_samples(samples, size)
    results = []
    for epoch in EPOCHS:
        note = ctx.drop_caches() if epoch == 1 else None
        ns = run_epoch(samples, size, epoch)
        results.append(Result(per_second(len(samples), ns), "samples/s", note, f"epoch{epoch}"))
    return results


WORKLOADS = [Workload("dataloader", epochs)]
