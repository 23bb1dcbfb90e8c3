"""Checkpoint workload: every rank of a training job writes its shard at the same instant.

8 writer threads, released together, each write one 256 MiB file (4 MiB writes, fsync,
close). Two numbers: seconds until the last close returns (how long the GPUs wait), and
seconds until every byte is in the volume's durable tier. On an aifs mount the second is
taken by asking the mount to upload everything under the checkpoint and wait (what
`aifs sync --wait` does) right after the last close; on any other filesystem fsync already
made the bytes as durable as they will get, so the two are the same.
"""

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from aifs.bench.fileio import write_synced
from aifs.bench.measure import MiB, Stopwatch
from aifs.bench.workload import BenchError, Context, Result, Workload
from aifs.control.client import ControlClient, ControlError

WRITERS = 8
FILE_SIZE = 256 * MiB
IO_SIZE = 4 * MiB
START_TIMEOUT_S = 60.0


def all_at_once(shards: list[Callable[[], None]]) -> int:
    """Run each shard on its own thread, all released together as the ranks of a job are
    after a collective; returns the nanoseconds until the last one has returned."""
    start = threading.Barrier(len(shards) + 1, timeout=START_TIMEOUT_S)

    def released(shard: Callable[[], None]) -> None:
        start.wait()
        shard()

    with ThreadPoolExecutor(len(shards)) as pool:
        running = [pool.submit(released, shard) for shard in shards]
        start.wait()
        with Stopwatch() as watch:
            for shard in running:
                shard.result()
    return watch.ns


def _wait_durable(directory: str) -> None:
    """Upload everything under `directory` to the durable tier and wait, if it is on aifs."""
    try:
        control = ControlClient.for_path(Path(directory))
    except ControlError:
        return  # not an aifs mount: fsync was the last word
    try:
        control.sync_wait([os.stat(directory).st_ino])
    except ControlError as error:
        raise BenchError(f"waiting for uploads: {error}") from error


def checkpoint(ctx: Context) -> list[Result]:
    size = ctx.scaled(FILE_SIZE)
    directory = os.path.join(ctx.workdir, "checkpoint")
    os.mkdir(directory)
    chunk = memoryview(os.urandom(min(IO_SIZE, size)))
    paths = [os.path.join(directory, f"rank{rank}.pt") for rank in range(WRITERS)]
    writing_ns = all_at_once([partial(write_synced, path, size, chunk) for path in paths])
    with Stopwatch() as draining:
        _wait_durable(directory)
    return [
        Result(writing_ns / 1e9, "s", label="close"),
        Result((writing_ns + draining.ns) / 1e9, "s", label="durable"),
    ]


WORKLOADS = [Workload("checkpoint", checkpoint)]
