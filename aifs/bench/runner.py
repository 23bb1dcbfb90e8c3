"""Runs a plan on each path in turn (never two at once), each in a private scratch directory."""

import itertools
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from aifs.bench.caches import CacheDropper
from aifs.bench.registry import plan
from aifs.bench.workload import BenchError, Context, Result, Results, Workload

Announce = Callable[[str, Workload, bool], None]


@contextmanager
def scratch_dir(root: str) -> Iterator[str]:
    """A fresh `root/.aifs-bench-<pid>`, removed afterwards, also on error or Ctrl-C.

    The removal is synced so that its background work (writeback, journal commits,
    discards) does not slow down whatever path is measured next.
    """
    path = os.path.join(root, f".aifs-bench-{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        shutil.rmtree(path)
        os.sync()


def run(
    paths: Sequence[str],
    selected: Sequence[str] | None,
    scale: float,
    progress: Callable[[str], None],
) -> Results:
    """Run the selected workloads on every path; `progress` hears each step and warnings."""
    steps = plan(selected)
    drop_caches = CacheDropper(warn=progress)
    counter = itertools.count(1)
    total = len(paths) * len(steps)

    def announce(path: str, workload: Workload, reported: bool) -> None:
        role = "" if reported else " (setup)"
        progress(f"[{next(counter)}/{total}] {path}: {workload.name}{role}")

    context = partial(Context, scale=scale, drop_caches=drop_caches)
    return {path: _run_path(path, steps, context, announce) for path in paths}


def _run_path(
    path: str,
    steps: list[tuple[Workload, bool]],
    context: Callable[[str], Context],
    announce: Announce,
) -> dict[str, Result]:
    results: dict[str, Result] = {}
    with scratch_dir(path) as workdir:
        ctx = context(workdir)
        for workload, reported in steps:
            announce(path, workload, reported)
            measured = _run_one(workload, ctx, path)
            if reported:
                results.update(measured)
    return results


def _run_one(workload: Workload, ctx: Context, path: str) -> dict[str, Result]:
    """One workload's results by name; a failure says which workload broke on which path."""
    try:
        results = workload.run(ctx)
    except (OSError, BenchError) as error:
        raise BenchError(f"{workload.name} on {path}: {error}") from error
    return {workload.result_name(result): result for result in results}
