"""`aifs bench` end to end at a tiny scale: every result for every path, scratch dirs removed.

Caches are never really dropped here (the tests must not disturb the machine), which
also exercises the "caches not dropped" path.
"""

import dataclasses
import json
import os
import re
import resource
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aifs.bench import caches, registry
from aifs.cli.bench_cmd import bench

SCALE = "0.002"
RESULTS = [
    "create",
    "read-1t",
    "read-8t",
    "stat",
    "list",
    "write-seq",
    "read-seq-cold",
    "read-seq-warm",
    "randread-p50",
    "randread-p99", "checkpoint-close", "checkpoint-durable",
    "dataloader-epoch1",
    "dataloader-epoch2",
]
COLD = {"read-1t", "read-8t", "stat", "read-seq-cold", "randread-p50", "randread-p99",
        "dataloader-epoch1"}


@pytest.fixture(autouse=True)
def no_drop_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(caches, "DROP_CACHES", str(tmp_path / "absent" / "drop_caches"))


@pytest.fixture
def dirs(tmp_path: Path) -> list[str]:
    paths = [tmp_path / "first", tmp_path / "second"]
    for path in paths:
        path.mkdir()
    return [str(path) for path in paths]


def run_bench(*args: str) -> Result:
    return CliRunner().invoke(bench, ["--scale", SCALE, *args])


def assert_scratch_removed(dirs: list[str]) -> None:
    assert all(os.listdir(d) == [] for d in dirs)


def test_table_has_every_result_for_every_path(dirs: list[str]) -> None:
    result = run_bench(*dirs)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["workload", "unit", *dirs, dirs[0], "/", dirs[1]]
    rows = {line.split()[0]: re.split(r"\s{2,}", line)[2:] for line in lines[2 : 2 + len(RESULTS)]}
    assert list(rows) == RESULTS
    for name, cells in rows.items():
        values = [float(cell.split()[0].replace(",", "")) for cell in cells]
        assert len(values) == len(dirs) + 1 and all(v > 0 for v in values), name
        assert all(cell.endswith("[1]") for cell in cells[:-1]) == (name in COLD), name
    assert lines[-1] == f"[1] {caches.NOT_DROPPED}"
    assert_scratch_removed(dirs)


def test_json_has_every_result_for_every_path(dirs: list[str]) -> None:
    result = run_bench(*dirs, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document["results"]) == RESULTS == list(document["units"])
    for name, per_path in document["results"].items():
        assert list(per_path) == dirs and all(value > 0 for value in per_path.values()), name
    not_dropped = dict.fromkeys(dirs, caches.NOT_DROPPED)
    assert document["notes"] == {name: not_dropped for name in RESULTS if name in COLD}
    assert result.stderr.count("cannot drop caches") == 1
    assert_scratch_removed(dirs)


def test_only_reports_the_selection_and_runs_prerequisites(dirs: list[str]) -> None:
    result = run_bench(dirs[0], "--only", "read-seq-warm,list", "--json")
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)["results"]) == ["list", "read-seq-warm"]
    assert "read-seq-cold (setup)" in result.stderr


@pytest.mark.parametrize(
    ("error", "message"),
    [(KeyboardInterrupt(), "Aborted!"), (OSError(5, "Input/output error"), "stat on ")],
)
def test_scratch_removed_when_interrupted_or_failing(
    dirs: list[str], monkeypatch: pytest.MonkeyPatch, error: BaseException, message: str
) -> None:
    def fail(ctx: object) -> list:
        raise error

    broken = dataclasses.replace(registry.WORKLOADS["stat"], run=fail)
    monkeypatch.setitem(registry.WORKLOADS, "stat", broken)
    result = run_bench(*dirs)
    assert result.exit_code == 1
    assert message in result.output
    assert_scratch_removed(dirs)


@pytest.mark.parametrize(
    "args", [["{0}", "--only", "nope"], ["{0}", "{0}/"], ["{0}/missing"], ["{0}", "--scale", "0"]]
)
def test_bad_arguments_are_rejected(dirs: list[str], args: list[str]) -> None:
    result = run_bench(*(arg.format(dirs[0]) for arg in args))
    assert result.exit_code == 2, result.output
    assert_scratch_removed(dirs)


@pytest.mark.parametrize(("size", "available", "written"), [
    (256 << 20, 16 << 30, 256 << 20),  # all of it
    (256 << 20, 128 << 20, 64 << 20),  # half of what is available, at most
])
def test_backing_free_memory_writes_what_it_may(monkeypatch: pytest.MonkeyPatch, size: int, available: int,
                                                written: int) -> None:
    monkeypatch.setattr(caches, "mem_available", lambda: available)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert caches.back_free_memory(size) == written
    # every page was written: a fault each, or one per huge page at the least
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults >= written >> 21
