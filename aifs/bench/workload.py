"""What a workload is: a function of a Context that returns measured Results.

Kept apart from the workloads themselves so that new ones (checkpoints, DataLoader
epochs, ...) only add a module and a registry entry.
"""

from collections.abc import Callable
from dataclasses import dataclass


class BenchError(RuntimeError):
    """The filesystem misbehaved (short read, missing entries), so the numbers would lie."""


@dataclass(frozen=True)
class Result:
    """One measured number; `label` tells apart several results of one workload (p50, p99)."""

    value: float
    unit: str
    note: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Context:
    """All a workload may use: its private directory, the scale, and the cache dropper."""

    workdir: str
    scale: float
    drop_caches: Callable[[], str | None]

    def scaled(self, n: int) -> int:
        """n times the scale, never below 1 so every workload still does some work."""
        return max(1, round(n * self.scale))


@dataclass(frozen=True)
class Workload:
    """A named benchmark step; `requires` names earlier workloads whose files it reads."""

    name: str
    run: Callable[[Context], list[Result]]
    requires: tuple[str, ...] = ()

    def result_name(self, result: Result) -> str:
        """The name a result is reported under: the workload's, qualified by its label."""
        return f"{self.name}-{result.label}" if result.label else self.name


# path -> result name -> Result, in run order.
Results = dict[str, dict[str, Result]]


@dataclass(frozen=True)
class Mode:
    """A bench that builds its own volumes under BASE and runs alone, for what no workload on
    a given directory can measure (which tier serves a read, what durability in S3 costs).

    `run(base, scale, progress, s3_endpoint=None, bucket=..., s3_own_core=False)` returns Results whose columns
    are whatever the mode compares; `goals` turns them into lines naming each target. `options` names
    the further keyword arguments of `run` that only this mode takes (`aifs bench --nodes`, ...).
    `ratio` names the two columns the table's ratio column compares (default: the first and the last).
    """

    name: str
    summary: str  # one line for `aifs bench --help`
    run: Callable[..., Results]
    goals: Callable[[Results], list[str]]
    options: tuple[str, ...] = ()
    ratio: tuple[str, str] | None = None
