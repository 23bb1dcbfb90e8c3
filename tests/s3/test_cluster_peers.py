"""The mounts of a shared volume as one cache: a block read from S3 by one node is placed on
the node consistent hashing names for it, and the other nodes read it from there instead of
from S3. Three mounts on one Redis and one bucket, each serving its tiers on loopback."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from conftest import aifs_cli
from flash.servers import new_secret_file
from helpers import pattern

from .helpers_cluster import make_cluster, mount_all, redis_server  # noqa: F401 - fixtures
from .helpers_mount import aifs_ok, make_s3_volume, poll_status, sync_wait, wait_for  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout_s(240)

KiB = 1 << 10
FILES = 200


def peer_setup(tmp_path: Path) -> dict:
    return {"cluster": {"serve": "127.0.0.1:0", "secret_file": str(new_secret_file(tmp_path / "peers.secret")),
                        "timeout": 0.3, "read_bound": 0.6, "probe_interval": 0.2}}


def write_dataset(root: Path) -> dict[str, bytes]:
    """Small files of many sizes, and two files of several blocks."""
    files = {f"d/{i // 100}/s{i:04d}": pattern(i, 2 * KiB + 97 * i) for i in range(FILES)}
    files.update({f"big{i}": pattern(f"big{i}", 3 * (1 << 20) + 12345) for i in range(2)})
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def read_all(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert (root / name).read_bytes() == data, name


def block_gets(moto_log: Path, bucket: str) -> list[str]:
    """The object keys of every GET of a block the S3 endpoint answered for this bucket."""
    found = re.findall(rf'"GET /{bucket}/(\S+) HTTP', moto_log.read_text(errors="replace"))
    return [key for key in found if "?" not in key and "marker" not in key]


def peers_of(node) -> list[dict]:
    return poll_status(node)["tiers"]["peers"]["servers"]


def wait_all_see_each_other(nodes) -> None:
    for node in nodes:
        wait_for(lambda: len(peers_of(node)) == len(nodes) - 1, "every node to see its peers", timeout=30)


def settle_offers(node) -> None:
    wait_for(lambda: poll_status(node)["offers_pending"] == 0, "the offers to peers to be sent", timeout=60)


def test_a_dataset_crosses_from_s3_once_for_the_whole_cluster(make_cluster, moto_server, tmp_path):
    nodes = make_cluster(3, **peer_setup(tmp_path))
    a, b, c = mount_all(nodes)
    files = write_dataset(a)
    sync_wait(a)
    nodes[0].reload_from_s3()  # A's own copies gone: it too must read the bucket
    wait_all_see_each_other(nodes)
    bucket = nodes[0].setup.bucket
    before = len(block_gets(moto_server.log, bucket))
    read_all(a, files)
    fetched = block_gets(moto_server.log, bucket)[before:]
    assert len(fetched) == len(set(fetched)), "A fetched some block twice"
    settle_offers(nodes[0])
    for node, root in ((nodes[1], b), (nodes[2], c)):
        read_all(root, files)
        report = poll_status(node)["tiers"]
        assert report["s3"]["hits"] == 0, f"{root} read {report['s3']['hits']} blocks from S3"
        assert report["peers"]["hits"] > 0
    assert len(block_gets(moto_server.log, bucket)) - before == len(fetched), "B or C fetched from S3"
    fetched_from_peers = sum(peer["fetched_bytes"] for peer in peers_of(nodes[1]))
    served = sum(sum(poll_status(node)["served_to_peers"].values()) for node in nodes)
    assert fetched_from_peers > 0 and served >= fetched_from_peers
    assert "served to peers: 127.0.0.1" in aifs_ok("status", str(a))


def test_a_frozen_peer_is_passed_over_marked_down_and_probed_back(make_cluster, tmp_path):
    """A peer that stops answering, before its session times out: its breaker takes it off the
    ring, reads go to S3, and its prober brings it back once it answers."""
    nodes = make_cluster(3, meta={"session_timeout": 120.0}, **peer_setup(tmp_path))
    a, b, c = mount_all(nodes)
    files = write_dataset(a)
    sync_wait(a)
    nodes[0].reload_from_s3()
    wait_all_see_each_other(nodes)
    read_all(a, files)
    settle_offers(nodes[0])
    frozen = nodes[2].daemon_pids()
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        read_all(b, files)  # C's share comes from S3, without an error
        report = poll_status(nodes[1])["tiers"]
        assert report["s3"]["hits"] > 0 and report["peers"]["hits"] > 0
        down = [p for p in report["peers"]["servers"] if not p["up"]]
        assert len(down) == 1 and down[0]["failures"] >= 3
        assert "1 of 2 peers up" in aifs_ok("status", str(b))
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: all(p["up"] for p in peers_of(nodes[1])), "the prober to bring C back", timeout=30)


def test_peers_over_verbs_where_no_rdma_device_is_refuse_the_mount(make_cluster, tmp_path):
    setup = peer_setup(tmp_path)
    setup["cluster"]["transport"] = "verbs"
    node = make_cluster(1, **setup)[0]
    mounted = aifs_cli("mount", "-c", str(node.config), "--background", str(node.path))
    assert mounted.returncode != 0
    assert "transport 'verbs' cannot run here" in mounted.stderr, mounted.stderr
