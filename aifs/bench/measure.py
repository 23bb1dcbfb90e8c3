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
    """Also the CPU-seconds spent in the with-block on the cores this thread may run on (by
    every process and the kernel, from /proc/stat), in `cpu_s`, and the least wall time
    they allow on those cores, in `floor_s`: where a client and its server share the cores,
    no run can be faster. A server kept on a core of its own (--s3-own-core) is left out,
    as if it ran on another machine."""

    cpu_s: float = 0.0
    floor_s: float = 0.0

    def start(self) -> None:
        self._cores = os.sched_getaffinity(0)
        self._busy = _busy_ticks(self._cores)
        super().start()

    def stop(self) -> None:
        super().stop()
        self.cpu_s = (_busy_ticks(self._cores) - self._busy) / os.sysconf("SC_CLK_TCK")
        self.floor_s = self.cpu_s / len(self._cores)


def _busy_ticks(cores: set[int]) -> int:
    """Clock ticks `cores` spent on anything but idling or waiting for the disk."""
    busy = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])  # then steal: not ours
                busy += user + nice + system + irq + softirq
    return busy


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
