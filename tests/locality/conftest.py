"""Two nodes of one shared volume, each with a host name of its own: two mounts on one
redis-server and one bucket, each serving its RAM and NVMe to the other on loopback. Each
mount runs in a UTS namespace of its own whose host name is the node's, as a mount on
another machine would, so the names schedulers see are real host names."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import MOUNT_TIMEOUT, _describe, _mount_dev, _mounted
from flash.servers import child_env, new_secret_file
from redisserver import running
from s3.conftest import moto_server  # noqa: F401 - the fixture
from s3.helpers_mount import S3Setup, S3Volume, poll_status, sync_wait, wait_for

from aifs.control.client import ControlClient

KiB = 1 << 10
FILES = 48
FILE_BYTES = 96 * KiB  # one block each (the volume's blocks are 1 MiB)
BIG_BYTES = 3 * (1 << 20) + 12345  # a file of four blocks
SAMPLES = 64
SAMPLE_BYTES = 32 * KiB
NAMES = ("node-a", "node-b")
BUDGET_S = 240.0  # past this, the nodes' FUSE connections are aborted: a hang fails the tests, not the run


class NamedNode(S3Volume):
    """A node whose mount runs under the host name `name`."""

    def __init__(self, base: Path, setup: S3Setup, name: str) -> None:
        super().__init__(base, setup)
        self.name = name

    def mount(self) -> None:
        command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.name,
                   sys.executable, "-m", "aifs", "mount", "-c", str(self.config), "--background", str(self.path)]
        cp = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=MOUNT_TIMEOUT,
                            stdin=subprocess.DEVNULL)
        if cp.returncode != 0 or not _mounted(self.path):
            self._force_unmount()
            raise RuntimeError(f"aifs mount {self.path} as {self.name} failed: {_describe(cp)}")
        self.st_dev = _mount_dev(self.path)

    def control(self, op: str, **args: Any) -> Any:
        return ControlClient(self.state_dir, timeout=30).call(op, **args)


@dataclass
class Cluster:
    nodes: list[NamedNode]
    files: list[str]  # relative to each mount's root: data/f000 ..., then data/big
    samples: list[str]  # train/s000 ...: the sampler tests' dataset

    def paths(self, node: NamedNode, names: list[str] | None = None) -> list[Path]:
        return [node.path / name for name in (self.files if names is None else names)]


def peers_up(node: NamedNode) -> bool:
    servers = poll_status(node)["tiers"]["peers"]["servers"]
    return len(servers) == 1 and servers[0]["up"]


def settle(node: NamedNode) -> None:
    """Wait until the blocks this node offered to its peer have been sent."""
    wait_for(lambda: poll_status(node)["offers_pending"] == 0, "the offers to peers to be sent", timeout=30)


@pytest.fixture(scope="package")
def cluster(moto_server, tmp_path_factory) -> Iterator[Cluster]:  # noqa: F811
    """Node A wrote FILES small files and a big one under data/, SAMPLES under train/,
    uploaded them, and was mounted anew with its local tiers wiped: nothing is on either node
    yet, everything is in the bucket. The tests of locate read only under data/, those of the
    sampler only under train/."""
    base = tmp_path_factory.mktemp("locality")
    with running(base / "redis") as redis:
        # Files stored each on its own: a node then holds exactly the files it read or was
        # offered, which these tests count. (A node jumping about in a pack fetches all of its
        # members, docs/packing.md.)
        setup = {"writeback": {"pack_below": 0},
                 "meta": {"url": redis.url, "heartbeat": 0.3, "session_timeout": 30.0},
                 "cluster": {"serve": "127.0.0.1:0", "secret_file": str(new_secret_file(base / "peers.secret")),
                             "timeout": 0.5, "read_bound": 1.0, "probe_interval": 0.2}}
        bucket = moto_server.create_bucket()
        nodes = [NamedNode(base / name, S3Setup(moto_server.endpoint, bucket, **setup), name) for name in NAMES]
        watchdog = threading.Timer(BUDGET_S, lambda: [node.abort_connection() for node in nodes])
        watchdog.daemon = True
        watchdog.start()
        try:
            yield _written(nodes)
        finally:
            watchdog.cancel()
            for node in nodes:
                node.close()


def _written(nodes: list[NamedNode]) -> Cluster:
    a, b = nodes
    a.mount()
    (a.path / "data").mkdir()
    (a.path / "train").mkdir()
    files = [f"data/f{i:03d}" for i in range(FILES)] + ["data/big"]
    for i, name in enumerate(files[:-1]):
        (a.path / name).write_bytes(bytes([i]) * FILE_BYTES)
    (a.path / "data" / "big").write_bytes(b"B" * BIG_BYTES)
    samples = [f"train/s{i:03d}" for i in range(SAMPLES)]
    for i, name in enumerate(samples):
        (a.path / name).write_bytes(i.to_bytes(2, "big") * (SAMPLE_BYTES // 2))
    sync_wait(a.path)
    a.umount()
    a.wipe_local()
    a.mount()
    b.mount()
    for node in nodes:
        wait_for(lambda: peers_up(node), f"{node.name} to see its peer", timeout=30)
    return Cluster(nodes, files, samples)

