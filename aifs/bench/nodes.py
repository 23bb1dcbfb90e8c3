"""The nodes of a shared volume at work together: a process per node, released at one instant.

A node's share of a workload runs in a process of its own, so the nodes do not share one
interpreter's lock, and every share waits for the same start time, so the nodes really
work at once. Shares are module-level functions of their start time and arguments, which
return the Span they measured.
"""

import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from multiprocessing import get_context

from aifs.bench.measure import per_second
from aifs.bench.workload import Result

START_LEAD_S = 0.2  # the nodes' processes are told to start together this far ahead
Span = tuple[int, int, int]  # operations done, monotonic ns at the start and at the end


def tree(root: str, dirs: int, files: int) -> tuple[list[str], list[str]]:
    """Directories under `root`, and files dealt round-robin over them."""
    directories = [os.path.join(root, f"d{d:03d}") for d in range(dirs)]
    return directories, [os.path.join(directories[i % dirs], f"f{i:05d}") for i in range(files)]


def wait_until(start_at: int) -> None:
    time.sleep(max(0, start_at - time.monotonic_ns()) / 1e9)


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


def rates(name: str, spans: list[Span], unit: str) -> dict[str, Result]:
    """All nodes together, then each node when there are several."""
    total = sum(count for count, _, _ in spans)
    span = max(end for _, _, end in spans) - min(start for _, start, _ in spans)
    rows = {name: Result(per_second(total, span), unit)}
    if len(spans) > 1:
        rows |= {f"{name}-node{i}": Result(per_second(count, end - start), unit)
                 for i, (count, start, end) in enumerate(spans, 1)}
    return rows
