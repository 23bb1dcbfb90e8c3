"""The NVMe fill queue: copies land in batches on its thread, a full queue refuses, close drains."""

import threading

from aifs.tiers.fills import Fills
from aifs.tiers.nvme import NvmeTier


def test_copies_queued_while_one_lands_go_down_together():
    landed: list[list[int]] = []
    started, release = threading.Event(), threading.Event()

    def land(batch):
        landed.append([block_id for block_id, _ in batch])
        started.set()
        release.wait(5)

    fills = Fills(land)
    assert fills.submit(1, b"a")
    assert started.wait(5)
    for block_id in range(2, 6):  # queued behind the first landing
        assert fills.submit(block_id, b"b")
    release.set()
    assert fills.wait_idle(5)
    assert landed == [[1], [2, 3, 4, 5]]
    fills.close()


def test_a_full_queue_refuses_and_a_failed_landing_stops_nothing():
    calls = []

    def land(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise OSError("disk gone")

    fills = Fills(land, max_bytes=10)
    assert not fills.submit(1, bytes(11))
    assert fills.submit(2, bytes(10))
    assert fills.wait_idle(5)
    assert fills.submit(3, bytes(10))  # the failure was logged; the thread goes on
    assert fills.wait_idle(5)
    assert calls == [1, 1]
    fills.close()
    assert not fills.submit(4, b"x")


def test_nvme_fill_caches_new_blocks_once_and_reads_them_back(tmp_path):
    nvme = NvmeTier(tmp_path / "nvme", 1 << 20)
    nvme.put(1, b"one")
    nvme.fill([(1, b"other"), (2, b"two" * 1000), (3, b"three")])
    assert [nvme.get(i) for i in (1, 2, 3)] == [b"one", b"two" * 1000, b"three"]
    assert nvme.used() == 3 + 3000 + 5
    nvme.close()
    reopened = NvmeTier(tmp_path / "nvme", 1 << 20)
    assert [reopened.get(i) for i in (1, 2, 3)] == [b"one", b"two" * 1000, b"three"]
    reopened.close()
