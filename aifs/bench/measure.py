"""Timing and statistics helpers, so every workload converts nanoseconds the same way."""

import math
import time
from collections.abc import Sequence
from types import TracebackType

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class Stopwatch:
    """Times a with-block with perf_counter_ns (monotonic, finest resolution); result in `ns`."""

    ns: int = 0

    def __enter__(self) -> "Stopwatch":
        self._start = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.ns = time.perf_counter_ns() - self._start


def per_second(count: float, ns: int) -> float:
    """Rate of `count` things done in `ns` nanoseconds (a zero duration counts as 1 ns)."""
    return count * 1e9 / max(ns, 1)


def mib_per_second(nbytes: int, ns: int) -> float:
    """Throughput in MiB/s."""
    return per_second(nbytes, ns) / MiB


def percentile(samples: Sequence[int], p: float) -> int:
    """Nearest-rank percentile: always an observed sample, never an interpolation."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(len(ordered) * p / 100))
    return ordered[rank - 1]
