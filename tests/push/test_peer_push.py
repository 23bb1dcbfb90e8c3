"""`aifs push` on a shared volume without flash servers: two nodes (two mounts on one
redis-server and one bucket, each serving its RAM and NVMe to the other on loopback). Node B
wrote the files, so its NVMe holds their blocks and node A holds none; a push from A sends
the pieces to B when B's `[cluster] transforms` enables the transform, and transforms them
itself, saying why, when it does not. The results are byte for byte the transform of the
whole files on the client either way, and B killed mid-run changes nothing in them."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import aifs_cli  # tests/conftest.py
from flash.servers import new_secret_file
from redisserver import running
from s3.conftest import moto_server  # noqa: F401 - the fixture
from s3.helpers_mount import S3Setup, S3Volume, poll_status, sync_wait, wait_for

import aifs.push
from aifs.config import ConfigError, load_config
from aifs.push.predicate import Condition
from aifs.push.transforms import Filter

from .conftest import BLOCK, jsonl

WHERE = ('lang == "en"', "score >= 0.5")
FILTER = Filter([Condition.parse(w) for w in WHERE])
BUDGET_S = 120.0  # past this, the nodes' FUSE connections are aborted: a hang fails the tests, not the run


@dataclass
class Nodes:
    a: S3Volume
    b: S3Volume
    files: dict[str, bytes]

    @property
    def source(self) -> Path:
        return self.a.path / "raw"

    def results(self, out: Path) -> dict[str, bytes]:
        assert sorted(os.listdir(out)) == sorted(self.files), "only the results, no temporary files"
        return {name: (out / name).read_bytes() for name in self.files}

    def expected(self) -> dict[str, bytes]:
        return {name: FILTER(data) for name, data in self.files.items()}

    def remount(self, transforms: list[str]) -> None:
        """Mount A anew with its local tiers wiped (a job's client reads leave blocks there), and
        B with `[cluster] transforms` (its NVMe, which holds the files, stays)."""
        self.a.umount()
        self.a.wipe_local()
        self.a.mount()
        self.b.umount()
        self.b.setup.cluster["transforms"] = transforms
        self.b.write_config()
        self.b.mount()
        wait_for(lambda: peer_up(self.a) and peer_up(self.b), "the nodes to see each other again", timeout=30)


def short_records(data: bytes) -> bytes:
    """Without the records longer than a block, which travel raw (and make the bytes moved a
    measure of them rather than of the transform)."""
    return b"".join(line for line in data.splitlines(keepends=True) if len(line) < BLOCK // 16)


def peer_up(node: S3Volume) -> bool:
    servers = poll_status(node)["tiers"]["peers"]["servers"]
    return len(servers) == 1 and servers[0]["up"]


@pytest.fixture(scope="module")
def nodes(moto_server, tmp_path_factory) -> Iterator[Nodes]:  # noqa: F811
    base = tmp_path_factory.mktemp("peer-push")
    with running(base / "redis") as redis:
        cluster = {"serve": "127.0.0.1:0", "secret_file": str(new_secret_file(base / "peers.secret")),
                   "timeout": 0.5, "read_bound": 1.0, "probe_interval": 0.2}
        bucket = moto_server.create_bucket()
        a, b = (S3Volume(base / name, S3Setup(moto_server.endpoint, bucket, block_size=BLOCK, cluster=dict(cluster),
                                              meta={"url": redis.url, "heartbeat": 0.3, "session_timeout": 30.0}))
                for name in ("a", "b"))
        watchdog = threading.Timer(BUDGET_S, lambda: [node.abort_connection() for node in (a, b)])
        watchdog.daemon = True
        watchdog.start()
        try:
            a.mount()
            b.mount()
            files = {"a.jsonl": short_records(jsonl(3, 5000)), "b.jsonl": jsonl(4, 600, final_newline=False)}
            (b.path / "raw").mkdir()
            for name, data in files.items():
                (b.path / "raw" / name).write_bytes(data)
            sync_wait(b.path)
            wait_for(lambda: peer_up(a) and peer_up(b), "the nodes to see each other", timeout=30)
            yield Nodes(a, b, files)
        finally:
            watchdog.cancel()
            for node in (a, b):
                node.close()


def test_without_transforms_on_the_peer_the_client_transforms_and_says_why(nodes: Nodes):
    nodes.remount([])
    out = nodes.a.path / "by-client"
    report = aifs.push.filter([nodes.source], out, where=WHERE)
    assert nodes.results(out) == nodes.expected()
    assert (report.on_servers, report.on_client) == (0, sum(map(len, nodes.files.values()))), report
    assert any('transforms = ["filter"]' in note and "[cluster]" in note for note in report.notes), report.notes


def test_a_peer_that_runs_the_transform_gets_the_pieces_of_its_blocks(nodes: Nodes):
    nodes.remount(["filter", "mask"])
    out = nodes.a.path / "on-peer"
    report = aifs.push.filter([nodes.source], out, where=WHERE)
    assert nodes.results(out) == nodes.expected()
    assert report.on_servers > report.bytes_in // 2, report
    assert report.moved < 0.5 * report.bytes_in, report  # results and boundary records travel, not the files


def test_a_peer_killed_mid_run_changes_nothing_in_the_output(nodes: Nodes):
    """B is SIGKILLed once the first piece is done: its pending pieces are transformed on A, and
    no result is in place before it is complete."""
    nodes.remount(["filter"])
    out = nodes.a.path / "after-kill"
    outputs = [out / name for name in nodes.files]
    killed: list[bool] = []

    def progress(report) -> None:
        if report.on_servers > 0 and not killed:
            nodes.b.kill9()
            killed.append(True)
        assert report.files == len(outputs) or not outputs[report.files].exists(), "a result before it is complete"

    try:
        report = aifs.push.filter([nodes.source], out, where=WHERE, progress=progress, timeout=10.0)
    except aifs.push.PushError:
        assert not any(path.exists() for path in outputs)
        return
    assert killed
    assert nodes.results(out) == nodes.expected()
    assert report.on_client > 0 and report.on_servers > 0, report
    assert any("peer node" in note and "did not answer" in note for note in report.notes), report.notes


def cluster_error(tmp_path: Path, lines: str) -> str:
    config = tmp_path / "aifs.toml"
    secret = new_secret_file(tmp_path / "peers.secret")
    patterns = tmp_path / "mask.toml"
    patterns.write_text("[patterns.ssn]\nregex = '\\d{3}-\\d{2}-\\d{4}'\n")
    lines = lines.replace("PATTERNS", str(patterns))
    config.write_text(f'[volume]\nstate_dir = "{tmp_path / "state"}"\n[meta]\nurl = "redis://127.0.0.1:1/0"\n'
                      f'[cluster]\nsecret_file = "{secret}"\n{lines}\n')
    with pytest.raises(ConfigError) as error:
        load_config(config, state_dir=tmp_path / "state")
    return str(error.value)


@pytest.mark.parametrize("lines, message", [
    ('serve = "127.0.0.1:0"\ntransforms = ["filter", "eval"]', "unknown transform eval; there are filter"),
    ('transforms = ["filter"]', "transforms run on the block server this mount serves its peers; set cluster.serve"),
    ('serve = "127.0.0.1:0"\ntransforms = ["mask"]\nmask_patterns = "/nonexistent/mask.toml"',
     "cannot read the mask patterns in /nonexistent/mask.toml"),
    ('serve = "127.0.0.1:0"\ntransforms = ["filter"]\nmask_patterns = "PATTERNS"',
     "mask patterns are for the mask transform, which is not enabled"),
])
def test_cluster_transforms_are_checked_at_start(tmp_path: Path, lines: str, message: str):
    error = cluster_error(tmp_path, lines)
    assert message in error and "\n" not in error, error


def test_flash_serve_checks_its_transforms_alike(tmp_path: Path):
    secret = new_secret_file(tmp_path / "flash.secret")
    serve = ("flash", "serve", "--dir", str(tmp_path / "d"), "--capacity", "1MiB", "--listen", "127.0.0.1:0",
             "--secret-file", str(secret))
    for options, message in ((("--transforms", "filter,eval"), "unknown transform eval"),
                             (("--transforms", "filter", "--mask-patterns", str(tmp_path / "none.toml")),
                              "cannot read the mask patterns")):
        cp = aifs_cli(*serve, *options, timeout=30)
        assert cp.returncode == 2 and message in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
