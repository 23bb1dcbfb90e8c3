"""Durability "cluster", the default of a shared volume with flash servers: close() returns once
the file's blocks are pinned on the flash servers, so every node reads them at once and the
writer's death loses nothing; another node uploads what the dead one left."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
from flash.servers import ServerProcess, new_secret_file, start_all
from helpers import pattern

from aifs.meta import MetaEngine
from aifs.meta.redis_kv import RedisKV

from .faultproxy import FaultProxy, Faults
from .helpers_cluster import make_cluster, mount_all, redis_server  # noqa: F401 - fixtures
from .helpers_mount import file_state, make_s3_volume, poll_status, wait_for  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout_s(240)

MiB = 1 << 20


@pytest.fixture
def flash(tmp_path: Path) -> Iterator[tuple[list[ServerProcess], dict]]:
    """Three flash servers, and the remote tier table that uses them with two copies per block."""
    secret = new_secret_file(tmp_path / "flash.secret")
    servers = start_all([ServerProcess(tmp_path / f"flash{i}", secret_file=secret) for i in range(3)])
    yield servers, {"servers": [s.address for s in servers], "secret_file": str(secret), "replicas": 2,
                    "timeout": 0.3, "read_bound": 0.6}
    for server in servers:
        server.kill()


def checkpoint() -> dict[str, bytes]:
    return {f"ckpt/rank{i}.pt": pattern(f"rank{i}", 2 * MiB + 4321 * i) for i in range(3)}


def test_a_checkpoint_closed_on_a_node_that_dies_is_read_and_uploaded_by_the_others(
        make_cluster, moto_server, flash):
    servers, remote = flash
    nodes = make_cluster(3, remote=remote)
    writer = nodes[0]
    proxy = FaultProxy(moto_server.port, Faults()).start()
    writer.setup.endpoint = proxy.endpoint
    writer.write_config()
    a, b, c = mount_all(nodes)
    proxy.stop()  # the writer never reaches S3: its blocks get there through another node or not at all
    files = checkpoint()
    (a / "ckpt").mkdir()
    for name, data in files.items():
        (a / name).write_bytes(data)
    for name, data in files.items():
        assert (b / name).read_bytes() == data, f"{name} on B right after its close on A"
    writer.kill9()
    for name, data in files.items():
        assert (c / name).read_bytes() == data, f"{name} on C after A died"
    wait_for(lambda: all(file_state(b / name)["state"] == "uploaded" for name in files),
             "another node to upload what A left", timeout=90, every=0.2)
    assert sum(poll_status(node)["adopted_blocks"] for node in nodes[1:]) >= len(files)
    for server in servers:
        server.kill()
    nodes[1].reload_from_s3()
    for name, data in files.items():
        assert (b / name).read_bytes() == data, f"{name} from S3 alone"


def test_the_pack_a_node_was_putting_when_it_died_is_abandoned_and_its_files_uploaded_alone(
        make_cluster, moto_server, redis_server, flash):
    servers, remote = flash
    nodes = make_cluster(2, remote=remote)
    proxy = FaultProxy(moto_server.port, Faults()).start()
    nodes[0].setup.endpoint = proxy.endpoint
    nodes[0].write_config()
    a, b = mount_all(nodes)
    proxy.change(Faults(stall=1.0, stall_s=120))  # from now on S3 answers the writer nothing
    files = {f"small/f{i:02d}": pattern(f"f{i}", 5000 + 100 * i) for i in range(20)}
    (a / "small").mkdir()
    for name, data in files.items():
        (a / name).write_bytes(data)
    meta = MetaEngine(RedisKV.connect(redis_server.url), MiB, node=b"test")
    wait_for(lambda: meta.unfinished_elsewhere(), "the writer to start putting a pack", timeout=60, every=0.1)
    nodes[0].kill9()
    wait_for(lambda: all(file_state(b / name)["state"] == "uploaded" for name in files),
             "the other node to upload what the writer left", timeout=90, every=0.2)
    wait_for(lambda: not meta.unfinished_elsewhere(), "the other node to abandon the writer's pack", timeout=30)
    for server in servers:
        server.kill()
    nodes[1].reload_from_s3()
    for name, data in files.items():
        assert (b / name).read_bytes() == data, f"{name} from S3 alone"
    proxy.stop()


def test_a_close_that_cannot_reach_the_flash_servers_fails_and_loses_nothing(make_cluster, flash):
    servers, remote = flash
    nodes = make_cluster(2, remote=remote)
    a, b = mount_all(nodes)
    for server in servers[1:]:
        server.kill()  # one server left, two copies asked for
    with pytest.raises(OSError) as failed:
        with open(a / "unsafe", "wb") as f:
            f.write(pattern("unsafe", 3 * MiB))
    assert failed.value.errno == errno.EIO
    assert "did not reach the flash servers" in nodes[0].log_text()
    assert (a / "unsafe").read_bytes() == pattern("unsafe", 3 * MiB)  # staged here, and uploaded as usual
    wait_for(lambda: file_state(a / "unsafe")["state"] == "uploaded", "the upload", timeout=60, every=0.2)
