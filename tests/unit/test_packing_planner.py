"""The pack planner: which queued blocks go up together, the volume's and a path's own limit."""

import math

from aifs.config.models import WritebackConfig
from aifs.vfs.packing import PackPlanner

KiB = 1 << 10


def planner(lengths: dict[int, int]) -> PackPlanner:
    return PackPlanner(WritebackConfig(pack_below=64 * KiB, pack_size=1024 * KiB), lengths.get)


def test_a_rule_keeps_blocks_out_of_packs_or_packs_larger_ones():
    lengths = {1: 4 * KiB, 2: 4 * KiB, 3: 200 * KiB, 4: 200 * KiB, 5: 4 * KiB}
    plan = planner(lengths)
    plan.queued([1, 2], now=0.0)
    plan.queued([3, 4], now=0.0, below=256 * KiB)  # a path that packs blocks up to 256 KiB
    plan.queued([5], now=0.0, below=0)  # a path that never packs
    assert plan.next_upload([1, 2, 3, 4, 5], set(), 0.0, writers_busy=False) == ([1, 2, 3, 4], math.inf)
    assert plan.next_upload([5], set(), 0.0, writers_busy=False) == ([5], math.inf)


def test_blocks_without_a_rule_follow_the_volume_and_forget_drops_the_rule():
    lengths = {1: 200 * KiB, 2: 4 * KiB}
    plan = planner(lengths)
    plan.queued([1], now=0.0, below=256 * KiB)
    plan.forget([1])
    plan.queued([1, 2], now=0.0)
    assert plan.next_upload([1, 2], set(), 0.0, writers_busy=False) == ([1], math.inf)
