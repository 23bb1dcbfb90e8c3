"""Timing and statistics helpers, so every workload converts nanoseconds the same way."""

import math
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class Stopwatch:
    """Times a with-block with perf_counter_ns (monotonic, finest resolution); result in `ns`."""

    ns: int = 0

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._start = time.perf_counter_ns()

    def stop(self) -> None:
        self.ns = time.perf_counter_ns() - self._start


class MachineCpu(Stopwatch):
    """Also the CPU-seconds the whole machine spent in the with-block (every process and the
    kernel, from /proc/stat), in `cpu_s`: where a client and its server share the cores, no
    run can take less wall time than this over the core count."""

    cpu_s: float = 0.0

    def start(self) -> None:
        self._busy = _busy_ticks()
        super().start()

    def stop(self) -> None:
        super().stop()
        self.cpu_s = (_busy_ticks() - self._busy) / os.sysconf("SC_CLK_TCK")


def _busy_ticks() -> int:
    """Clock ticks all cores spent on anything but idling or waiting for the disk."""
    with open("/proc/stat") as f:
        ticks = [int(field) for field in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]  # then steal: not ours
    return user + nice + system + irq + softirq


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
