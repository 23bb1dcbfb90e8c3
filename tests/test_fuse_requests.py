"""What the kernel asks the mount for: a file opened only to be read costs an open and a
release, no flush; a directory listed again while unchanged is served from the kernel's
cache, and a listing after a change shows it. Counted with the mount's own FUSE totals."""

import os
import time

import pytest

from aifs.control.client import ControlClient

SETTLE_S = 10.0  # a bound for releases, which the kernel sends after close() has returned


def requests(path) -> dict[str, int]:
    totals = ControlClient.for_path(path).call("stats")["fuse"]
    return {op: int(figures["count"]) for op, figures in totals.items()}


def grown(before: dict[str, int], path, op: str, at_least: int = 0) -> int:
    """How many more `op` requests the mount has served, once at least `at_least` more came."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        more = requests(path).get(op, 0) - before.get(op, 0)
        if more >= at_least or time.monotonic() > deadline:
            return more
        time.sleep(0.01)


@pytest.fixture
def mounted(vol, d):
    if not vol.is_mount:
        pytest.skip("counts the requests of an aifs mount")
    return d


def test_a_file_opened_to_read_sends_no_flush_at_close(mounted):
    path = mounted / "sample"
    path.write_bytes(os.urandom(16384))
    before = requests(mounted)
    for _ in range(20):
        with open(path, "rb") as f:
            assert len(f.read()) == 16384
    assert grown(before, mounted, "release", at_least=20) == 20
    assert grown(before, mounted, "open") == 20
    assert grown(before, mounted, "flush") == 0, "a read-only close sends no FLUSH"
    before = requests(mounted)
    with open(path, "r+b") as f:
        f.write(b"x")
    assert grown(before, mounted, "flush", at_least=1) == 1, "a writer's close still seals what it wrote"
    assert path.read_bytes()[:1] == b"x"


def test_an_unchanged_listing_comes_from_the_kernel_and_a_change_shows(mounted):
    names = {f"f{i:04d}" for i in range(300)}
    for name in names:
        (mounted / name).write_bytes(b"")
    assert set(os.listdir(mounted)) == names
    before = requests(mounted)
    for _ in range(5):
        assert set(os.listdir(mounted)) == names
    assert grown(before, mounted, "readdir") == 0, "listings of an unchanged directory are the kernel's"
    (mounted / "added").write_bytes(b"")
    os.unlink(mounted / "f0000")
    names = names - {"f0000"} | {"added"}
    assert set(os.listdir(mounted)) == names
    os.rename(mounted / "f0001", mounted / "renamed")
    assert set(os.listdir(mounted)) == names - {"f0001"} | {"renamed"}
