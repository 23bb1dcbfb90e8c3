"""Three nodes of one volume (three mounts, one redis-server, one bucket): what one node
writes, renames, removes or changes, the others see; a tree built by all three at once ends
exactly as expected, and fsck finds it clean."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import aifs_cli

from .faultproxy import FaultProxy, Faults
from .helpers_cluster import make_cluster, mount_all, redis_server  # noqa: F401 - fixtures
from .helpers_mount import (  # noqa: F401 - make_s3_volume is a fixture
    aifs_ok, file_state, make_s3_volume, sha256_file, sync_wait, wait_for, write_random,
)

MiB = 1 << 20
SEEN_WITHIN_S = 10.0  # a bound for the test, far above the push delay (docs/benchmarks.md)

pytestmark = pytest.mark.timeout_s(240)


def test_a_file_closed_on_one_node_reads_back_on_the_others(make_cluster) -> None:
    a, b, c = mount_all(make_cluster(3))
    big = write_random(a / "big", 3 * MiB + 12345)
    (a / "small").write_bytes(b"written on a\n")
    for node in (b, c):
        assert sha256_file(node / "big") == big
        assert (node / "small").read_bytes() == b"written on a\n"
    (a / "small").write_bytes(b"rewritten on a, longer than before\n")
    assert (b / "small").read_bytes() == b"rewritten on a, longer than before\n", "close-to-open"


def _seen(check) -> None:
    wait_for(check, "the change to reach the other node", timeout=SEEN_WITHIN_S, every=0.005)


def test_rename_unlink_and_chmod_on_one_node_are_seen_on_the_others(make_cluster) -> None:
    a, b, c = mount_all(make_cluster(3))
    (a / "dir").mkdir()
    for name in ("moved", "removed", "mode"):
        (a / "dir" / name).write_bytes(name.encode())
    for node in (a, c):  # both other nodes have every name and attribute cached
        assert sorted(os.listdir(node / "dir")) == ["mode", "moved", "removed"]
        for name in ("moved", "removed", "mode"):
            os.stat(node / "dir" / name)
    os.rename(b / "dir" / "moved", b / "dir" / "renamed")
    os.unlink(b / "dir" / "removed")
    os.chmod(b / "dir" / "mode", 0o600)
    for node in (a, c):
        _seen(lambda: not (node / "dir" / "moved").exists() and (node / "dir" / "renamed").exists())
        _seen(lambda: not (node / "dir" / "removed").exists())
        _seen(lambda: stat.S_IMODE(os.stat(node / "dir" / "mode").st_mode) == 0o600)
        assert sorted(os.listdir(node / "dir")) == ["mode", "renamed"]
        assert (node / "dir" / "renamed").read_bytes() == b"moved"


def test_a_listing_cached_on_one_node_shows_what_another_adds_and_removes(make_cluster) -> None:
    a, b = mount_all(make_cluster(2))
    (a / "dir").mkdir()
    (a / "dir" / "old").write_bytes(b"")
    for _ in range(2):  # the second listing comes from b's kernel cache
        assert os.listdir(b / "dir") == ["old"]
    (a / "dir" / "new").write_bytes(b"")
    os.unlink(a / "dir" / "old")
    _seen(lambda: os.listdir(b / "dir") == ["new"])


def _build(root: Path, node: int, files: int, errors: list[BaseException]) -> None:
    """One node's share of the tree: files in a directory shared by all, in its own, and a
    subdirectory per batch in the shared one."""
    try:
        own = root / f"own{node}"
        own.mkdir()
        for i in range(files):
            (root / "shared" / f"n{node}-{i}").write_bytes(f"{node}:{i}".encode())
            (own / f"f{i}").write_bytes(b"x" * (i % 7))
            if i % 50 == 0:
                (root / "shared" / f"d{node}-{i}").mkdir()
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def test_a_tree_built_by_three_nodes_at_once_is_exact_and_fsck_clean(make_cluster) -> None:
    nodes = make_cluster(3)
    roots = mount_all(nodes)
    files = 400
    (roots[0] / "shared").mkdir()
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_build, args=(root, i, files, errors)) for i, root in enumerate(roots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    expected = sorted([f"n{n}-{i}" for n in range(3) for i in range(files)]
                      + [f"d{n}-{i}" for n in range(3) for i in range(0, files, 50)])
    subdirs = 3 * len(range(0, files, 50))
    for root in roots:
        assert sorted(os.listdir(root / "shared")) == expected
        assert os.stat(root / "shared").st_nlink == 2 + subdirs
        assert os.stat(root).st_nlink == 2 + 1 + 3
        for n in range(3):
            assert len(os.listdir(root / f"own{n}")) == files
        assert (root / "shared" / "n2-399").read_bytes() == b"2:399"
    for node in nodes:
        sync_wait(node.path)
        node.umount()
    report = aifs_ok("fsck", "-c", str(nodes[0].config))
    assert "clean" in report, report


def test_a_block_still_staged_on_its_writer_is_waited_for_then_refused_naming_the_node(
        make_cluster, moto_server) -> None:
    """Node A cannot reach the bucket: its closed file's blocks stay in its NVMe. B's read waits
    the bounded time, then fails with EIO and a log line naming A; once A uploads, B reads."""
    nodes = make_cluster(2, meta={"remote_block_wait": 1.0})
    writer, reader = nodes
    proxy = FaultProxy(moto_server.port, Faults()).start()
    writer.setup.endpoint = proxy.endpoint
    writer.write_config()
    a, b = mount_all(nodes)
    proxy.stop()  # A's uploads now fail; the file is still acknowledged by its close
    digest = write_random(a / "staged", 2 * MiB)
    with pytest.raises(OSError) as refused:
        (b / "staged").read_bytes()
    assert refused.value.errno == errno.EIO
    node = (writer.state_dir / "node-id").read_text().strip()
    assert f"staged on node {node}" in reader.log_text()
    writer.kill9()
    reader.umount()
    check = aifs_cli("fsck", "-c", str(reader.config))
    assert check.returncode == 1 and "staged-elsewhere" in check.stdout and node in check.stdout, check
    writer.setup.endpoint = moto_server.endpoint
    writer.write_config()
    writer.mount()  # the same node again: its staged blocks are still its to upload
    sync_wait(writer.path)
    reader.mount()
    assert sha256_file(reader.path / "staged") == digest


# Writes half a MiB every tenth of a second for the seconds given: a writer that keeps its
# node's uploads waiting (writers go first) without filling its staging area.
STEADY_WRITER = """
import os, sys, time
end = time.monotonic() + float(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    while time.monotonic() < end:
        f.write(os.urandom(1 << 19))
        f.flush()
        time.sleep(0.1)
"""


def test_a_reader_waiting_for_a_staged_block_has_its_writer_upload_it_first(make_cluster) -> None:
    """A's uploads wait while its writers are busy; a read on B of a block staged on A asks A
    to upload that block first, and gets it well within the wait, not EIO at its end."""
    nodes = make_cluster(2, meta={"remote_block_wait": 20.0})
    a, b = mount_all(nodes)
    busy = subprocess.Popen([sys.executable, "-c", STEADY_WRITER, str(a / "busy"), "40"])
    try:
        wait_for(lambda: (a / "busy").exists() and (a / "busy").stat().st_size > 2 * MiB, "the busy writer")
        digest = write_random(a / "wanted", 2 * MiB)
        assert file_state(a / "wanted")["state"] == "pending"  # held back by the busy writer
        assert sha256_file(b / "wanted") == digest
        assert busy.poll() is None, "the busy writer stopped before the read: the test proves nothing"
    finally:
        busy.kill()
        busy.wait()
