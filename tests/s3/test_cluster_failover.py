"""A shared volume whose metadata engine fails over: a Redis primary with one replica, watched
by one Sentinel, two nodes mounted through the Sentinel. The primary is killed while the
nodes write fsynced files; Sentinel promotes the replica, the nodes follow it, every file
whose fsync returned reads back identical on both nodes, the writes go on, and changes are
pushed again through the promoted replica."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redisserver import RedisServer, SentinelServer, start_replica, wait_until

from .conftest import MotoServer
from .helpers_cluster import HEARTBEAT_S, SESSION_TIMEOUT_S, mount_all
from .helpers_mount import S3Volume, aifs_ok, make_s3_volume, sync_wait, wait_for  # noqa: F401 - fixture
from .test_cluster_faults import Writers

FAILOVER_WITHIN_S = 30.0
SEEN_WITHIN_S = 10.0  # far below the kernel's attribute timeout: only a push shows a change this soon
WRITES_AFTER_FAILOVER = 10  # fsynced files each writer must finish on the promoted replica

pytestmark = pytest.mark.timeout_s(240)


class QuickSentinel(SentinelServer):
    """Fails over a second after the primary stops answering, and gives up on a stuck failover
    soon, so the test runs in seconds."""

    FAILOVER_TIMEOUT_MS = 2000


@pytest.fixture
def sentinel_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer, QuickSentinel]]:
    """A primary, its replica in sync, and a Sentinel that knows them both."""
    primary = RedisServer(tmp_path / "primary")
    primary.start()
    servers = [primary]
    try:
        servers.append(replica := start_replica(tmp_path / "replica", primary))
        sentinel = QuickSentinel(tmp_path / "sentinel", primary)
        servers.append(sentinel)
        sentinel.start()
        wait_until(lambda: sentinel.replicas_known() == 1, "the sentinel to learn of the replica")
        yield primary, replica, sentinel
    finally:
        for server in servers:
            server.kill()


@pytest.fixture
def sentinel_nodes(moto_server: MotoServer, sentinel_pair, make_s3_volume: Callable[..., S3Volume]):
    """Two unmounted nodes of one new volume whose [meta] url names the Sentinel."""
    sentinel = sentinel_pair[2]
    bucket = moto_server.create_bucket()
    meta = {"url": sentinel.url(), "heartbeat": HEARTBEAT_S, "session_timeout": SESSION_TIMEOUT_S}
    return [make_s3_volume(moto_server.endpoint, bucket, meta=meta) for _ in range(2)]


def last_written(directory: Path) -> int:
    """The highest file number a writer has created in `directory` so far (-1: none)."""
    return max((int(m.group(1)) for p in directory.iterdir() if (m := re.fullmatch(r"f(\d+)", p.name))),
               default=-1)


def test_the_nodes_follow_a_sentinel_failover_and_keep_every_fsynced_file(sentinel_pair, sentinel_nodes) -> None:
    primary, replica, sentinel = sentinel_pair
    roots = mount_all(sentinel_nodes)
    (roots[0] / "probe").write_bytes(b"mode changes after the failover")
    os.stat(roots[1] / "probe")  # its attributes cached on the other node
    with Writers(roots, sentinel_nodes[0].base / "stop") as writers:
        wait_for(lambda: all(last_written(d) >= WRITES_AFTER_FAILOVER for d in writers.dirs),
                 "the writers to get going", timeout=60)
        primary.kill()
        wait_for(lambda: sentinel.primary_port() == replica.port, "Sentinel to promote the replica",
                 timeout=FAILOVER_WITHIN_S, every=0.1)
        promoted_at = [last_written(d) for d in writers.dirs]
        wait_for(lambda: all(last_written(d) > mark + WRITES_AFTER_FAILOVER
                             for d, mark in zip(writers.dirs, promoted_at)),
                 "the writers to go on after the failover", timeout=60)
    for directory, mark in zip(writers.dirs, promoted_at):
        after = [name for name in writers.acknowledged
                 if name.startswith(f"{directory.name}/") and int(name.split("/f")[1]) > mark]
        assert len(after) >= WRITES_AFTER_FAILOVER, f"{directory.name}: {len(after)} fsyncs returned after the failover"
    for root in roots:
        writers.check(root)
    os.chmod(roots[0] / "probe", 0o600)
    wait_for(lambda: stat.S_IMODE(os.stat(roots[1] / "probe").st_mode) == 0o600,
             "the chmod to be pushed through the promoted replica", timeout=SEEN_WITHIN_S)
    for node in sentinel_nodes:
        sync_wait(node.path)
        node.umount()
    report = aifs_ok("fsck", "-c", str(sentinel_nodes[0].config))
    assert "clean" in report, report


FSYNC = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, bytes.fromhex(sys.argv[2]))
print("written", flush=True)
try:
    os.fsync(fd)
    print("fsync returned", flush=True)
except OSError as e:
    print(f"fsync failed: {e}", flush=True)
os.close(fd)
"""


def hold_back_replication(primary: RedisServer, replica: RedisServer) -> None:
    """Stop the replica and fill the primary's buffers towards it with changes of another
    database, so that what the primary acknowledges next stays in its own memory: a primary
    killed now takes those changes with it."""
    replica.pause()
    junk = os.urandom(1 << 20)
    with redis.Redis(port=primary.port, db=15, socket_timeout=30) as client:
        for i in range(40):
            client.set(f"junk{i}", junk)


def waiting_clients(server: RedisServer) -> int:
    """Clients the server holds in a blocking command (WAIT: a sync waiting for a replica)."""
    with redis.Redis(port=server.port, socket_timeout=5) as client:
        return client.info("clients")["blocked_clients"]


class FsyncedChangeLost(AssertionError):
    """fsync() returned, and the change it covered is gone."""


def test_an_fsync_interrupted_by_a_failover_does_not_return_for_lost_changes(sentinel_pair, sentinel_nodes) -> None:
    primary, replica, sentinel = sentinel_pair
    a, b = mount_all(sentinel_nodes)
    content = os.urandom(8000)
    hold_back_replication(primary, replica)
    writer = subprocess.Popen([sys.executable, "-c", FSYNC, str(a / "promised"), content.hex()],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "written\n"
        wait_for(lambda: waiting_clients(primary) > 0, "the fsync to wait for the stopped replica", timeout=30)
        primary.kill()
        replica.resume()
        out, err = writer.communicate(timeout=120)
    finally:
        writer.kill()
    assert writer.returncode == 0, err
    wait_for(lambda: sentinel.primary_port() == replica.port, "Sentinel to promote the replica",
             timeout=FAILOVER_WITHIN_S, every=0.1)
    if not out.startswith("fsync returned"):
        assert out.startswith("fsync failed"), out
        return
    for root in (a, b):
        if not (root / "promised").exists() or (root / "promised").read_bytes() != content:
            raise FsyncedChangeLost(f"fsync returned, but {root / 'promised'} is gone or changed after the failover")
