"""Every workload `aifs bench` knows, in run order, and how a selection becomes a plan.

To add a workload: write it in a module (one module per kind of workload) and add
that module's WORKLOADS here.

Bench modes measure what no workload on a given directory can, such as which tier a
block is read from: each builds its own volume, runs alone, and is listed in MODES as
NAME -> Mode (see aifs.bench.workload; aifs.bench.scratch has the scaffolding they share).
"""

from collections.abc import Iterable

from aifs.bench import (bigfile, checkpoint, checkpoint_s3, cluster, dataloader, metascale, packing, pushdown,
                        readpath, remote, smallfiles, tiers)
from aifs.bench.workload import Mode, Workload


def _index(workloads: Iterable[Workload]) -> dict[str, Workload]:
    """Name -> workload; checks names are unique and prerequisites come first."""
    index: dict[str, Workload] = {}
    for workload in workloads:
        missing = [name for name in workload.requires if name not in index]
        if workload.name in index or missing:
            raise ValueError(f"workload {workload.name!r}: duplicate, or {missing} not before it")
        index[workload.name] = workload
    return index


WORKLOADS = _index(
    [*smallfiles.WORKLOADS, *bigfile.WORKLOADS, *checkpoint.WORKLOADS, *dataloader.WORKLOADS]
)

MODES: dict[str, Mode] = {mode.name: mode for mode in (remote.MODE, checkpoint_s3.MODE, tiers.MODE, cluster.MODE,
                                                        metascale.MODE, readpath.MODE, pushdown.MODE,
                                                        packing.MODE)}


def plan(selected: Iterable[str] | None = None) -> list[tuple[Workload, bool]]:
    """The selected workloads (default: all) plus their prerequisites, in run order.

    The flag says whether to report a step; unselected prerequisites only lay down files.
    """
    wanted = set(WORKLOADS if selected is None else selected)
    needed: set[str] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(WORKLOADS[name].requires)
    return [(workload, name in wanted) for name, workload in WORKLOADS.items() if name in needed]
