"""Heat decays exponentially with time; `aifs status` lists the hottest files first."""

from __future__ import annotations

import os

import pytest

from aifs.cli.tier_status import tier_status_lines
from aifs.vfs.heat import Heat


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_heat_halves_every_half_life():
    clock = Clock()
    heat = Heat(half_life=10.0, clock=clock)
    for _ in range(4):
        heat.touch("a")
    assert heat.value("a") == pytest.approx(4.0)
    clock.now = 10.0
    assert heat.value("a") == pytest.approx(2.0)
    heat.touch("a")
    clock.now = 30.0
    assert heat.value("a") == pytest.approx(3.0 / 4)
    assert heat.value("never") == 0.0


def test_recent_use_outranks_old_heavy_use():
    clock = Clock()
    heat = Heat(half_life=10.0, clock=clock)
    for _ in range(8):
        heat.touch("last-week")
    clock.now = 50.0  # 8 / 32 = 0.25 left
    heat.touch("now")
    assert [key for key, _ in heat.hottest(2)] == ["now", "last-week"]


def test_table_is_bounded_and_keeps_the_hottest():
    heat = Heat(half_life=10.0, max_entries=100, clock=Clock())
    for i in range(100):
        heat.touch(("hot", i), amount=10.0)
    for i in range(1000):
        heat.touch(("cold", i))
    assert len(heat) <= 100
    assert all(key[0] == "hot" for key, _ in heat.hottest(40))


def test_status_lists_the_hottest_files(tiered):
    volume = tiered()
    paths = {name: volume.path / name for name in ("hot.bin", "warm.bin", "cold.bin")}
    for path in paths.values():
        path.write_bytes(os.urandom(300_000))
    for name, reads in (("hot.bin", 16), ("warm.bin", 8), ("cold.bin", 1)):
        for _ in range(reads):
            assert len(paths[name].read_bytes()) == 300_000
    report = volume.status()
    order = [entry["path"] for entry in report["hottest_files"]]
    assert order[:3] == ["/hot.bin", "/warm.bin", "/cold.bin"]
    assert report["hottest_files"][0]["heat"] > report["hottest_files"][1]["heat"]
    lines = tier_status_lines(report)
    assert any(line.strip().endswith("/hot.bin") for line in lines)
