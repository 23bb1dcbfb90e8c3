"""Each tier keeps to its byte budget while a mount writes and reads several times more data than
RAM and NVMe can hold: watched throughout over the control socket, not only at the end."""

from __future__ import annotations

import os
import threading

from aifs.control.client import ControlClient
from tests.tiering.conftest import MiB, read_uncached

FILES = 12
SIZE = 8 * MiB  # 96 MiB in all: six times the RAM budget, twice the NVMe one


class Watcher(threading.Thread):
    """Polls the mount's status and keeps, per tier, the most it ever used and its budget."""

    def __init__(self, state_dir) -> None:
        super().__init__(daemon=True)
        self.client = ControlClient(state_dir, timeout=30)
        self.peak: dict[str, int] = {}
        self.budget: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            for name, tier in self.client.call("status")["tiers"].items():
                self.peak[name] = max(self.peak.get(name, 0), tier["used"])
                self.budget[name] = tier["capacity"]


def test_ram_and_nvme_stay_within_budget_under_writes_and_reads(tiered):
    volume = tiered(ram="16MiB", nvme="48MiB")
    files = {volume.path / f"f{i}.bin": os.urandom(SIZE) for i in range(FILES)}
    watcher = Watcher(volume.state_dir)
    watcher.start()
    try:
        for path, data in files.items():
            path.write_bytes(data)
        for _ in range(2):
            for path, data in files.items():
                assert read_uncached(path) == data
    finally:
        watcher.done.set()
        watcher.join()
    for name in ("ram", "nvme"):
        assert 0 < watcher.peak[name] <= watcher.budget[name], (name, watcher.peak, watcher.budget)
    assert watcher.peak["nvme"] > 32 * MiB and watcher.peak["ram"] > 8 * MiB, "the load pressed on both budgets"
