"""A shared volume under faults: a node killed while the others write, the metadata
engine restarted under load. Nothing a surviving node acknowledged is lost, the dead
node's session is cleaned by the survivors, and fsck finds the volume clean."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers_cluster import SESSION_TIMEOUT_S, make_cluster, mount_all, redis_server  # noqa: F401
from .helpers_mount import aifs_ok, make_s3_volume, poll_status, sync_wait, wait_for  # noqa: F401

pytestmark = pytest.mark.timeout_s(300)


WRITER = """
import hashlib, os, sys
root, size, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
count = 0
while not os.path.exists(stop):
    data = os.urandom(size)
    path = os.path.join(root, f"f{count}")
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    print(f"f{count} {hashlib.sha256(data).hexdigest()}", flush=True)
    count += 1
"""


class Writers:
    """Processes that each write files, fsync and close them, and report what was acknowledged.
    Processes, not threads: a fork of a process with files open on a mount (the test starting
    a server) closes its copies of them, which waits for the mount."""

    def __init__(self, roots: list[Path], stop_file: Path, size: int = 20_000) -> None:
        self.stop_file = stop_file
        self.dirs = [root / f"w{i}" for i, root in enumerate(roots)]
        self._args = [str(size), str(stop_file)]
        self.acknowledged: dict[str, str] = {}
        self.errors: list[str] = []

    def __enter__(self) -> "Writers":
        for directory in self.dirs:
            directory.mkdir()
        self._procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(d), *self._args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for d in self.dirs]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_file.touch()
        for directory, proc in zip(self.dirs, self._procs):
            out, err = proc.communicate(timeout=120)
            for line in out.splitlines():
                name, digest = line.split()
                self.acknowledged[f"{directory.name}/{name}"] = digest
            if proc.returncode != 0:
                self.errors.append(err)

    def check(self, root: Path) -> None:
        assert not self.errors, self.errors
        for relative, digest in self.acknowledged.items():
            assert hashlib.sha256((root / relative).read_bytes()).hexdigest() == digest, relative


def _sessions(node) -> list[dict]:
    return poll_status(node)["metadata"]["sessions"]


def test_a_node_killed_while_the_others_write_is_cleaned_and_nothing_is_lost(make_cluster) -> None:
    nodes = make_cluster(3)
    a, b, c = mount_all(nodes)
    held = open(a / "held-open", "wb")  # noqa: SIM115 - held across the kill on purpose
    held.write(b"x" * 100_000)
    held.flush()
    os.unlink(a / "held-open")  # open-unlinked on the node about to die
    assert len(_sessions(nodes[1])) == 3
    with Writers([b, c], nodes[0].base / "stop") as writers:
        time.sleep(1)
        nodes[0].kill9()
        wait_for(lambda: len(_sessions(nodes[1])) == 2, "the dead node's session to be cleaned",
                 timeout=SESSION_TIMEOUT_S * 10)
        time.sleep(1)
    with contextlib.suppress(OSError):  # its mount is gone
        held.close()
    assert len(writers.acknowledged) > 10
    for root in (b, c):
        writers.check(root)
    for node in nodes[1:]:
        sync_wait(node.path)
        node.umount()
    report = aifs_ok("fsck", "-c", str(nodes[1].config))
    assert "clean" in report, report


def test_redis_restarted_during_a_write_load_keeps_every_fsynced_file(make_cluster, redis_server) -> None:
    nodes = make_cluster(2)
    roots = mount_all(nodes)
    with Writers(roots, nodes[0].base / "stop") as writers:
        time.sleep(1)
        redis_server.restart()
        time.sleep(2)
    assert len(writers.acknowledged) > 10
    for root in roots:
        writers.check(root)
