"""GroupCommit: concurrent fsync callers share syncs, and each one is covered by a sync
that started after it arrived."""

import random
import threading
import time

import pytest
import trio

from aifs.vfs.groupcommit import GroupCommit

from .conftest import trio_test


class FakeSync:
    """A sync that takes `duration` seconds on its thread and logs when each one ran."""

    def __init__(self, duration: float = 0.02, fail_first: int = 0) -> None:
        self.duration = duration
        self.fail_first = fail_first
        self.started: list[float] = []
        self.finished: list[float] = []
        self.running = 0
        self.overlapped = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.started.append(time.monotonic())
            self.running += 1
            self.overlapped |= self.running > 1
            number = len(self.started)
        try:
            time.sleep(self.duration)
            if number <= self.fail_first:
                raise OSError(5, f"sync {number} failed")
        finally:
            with self._lock:
                self.running -= 1
        with self._lock:
            self.finished.append(self.started[number - 1])

    def covered(self, arrived: float) -> bool:
        """Some sync that started after `arrived` has completed successfully."""
        with self._lock:
            return any(start >= arrived for start in self.finished)


@trio_test
async def test_single_caller_runs_one_sync():
    sync = FakeSync()
    group = GroupCommit(sync)
    await group()
    await group()
    assert len(sync.started) == 2 and len(sync.finished) == 2


@trio_test
async def test_many_callers_share_few_syncs():
    sync = FakeSync(duration=0.05)
    group = GroupCommit(sync)
    callers = 50

    async def caller():
        await group()

    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    assert 1 <= len(sync.started) <= 2 < callers
    assert not sync.overlapped


@trio_test
async def test_every_wait_covers_a_sync_started_after_arrival():
    sync = FakeSync(duration=0.01)
    group = GroupCommit(sync)
    rng = random.Random(1)
    results = []

    async def caller(delay: float):
        await trio.sleep(delay)
        arrived = time.monotonic()
        await group()
        results.append(sync.covered(arrived))

    async with trio.open_nursery() as nursery:
        for _ in range(60):
            nursery.start_soon(caller, rng.uniform(0, 0.15))
    assert len(results) == 60 and all(results)
    assert len(sync.started) < 60, "callers arriving during a sync share the next one"
    assert not sync.overlapped


@trio_test
async def test_caller_arriving_during_a_sync_waits_for_the_next():
    sync = FakeSync(duration=0.1)
    group = GroupCommit(sync)
    done = []

    async def early():
        await group()
        done.append("early")

    async def late():
        await trio.sleep(0.03)  # the first sync is running now
        arrived = time.monotonic()
        await group()
        assert sync.covered(arrived)
        done.append("late")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(early)
        nursery.start_soon(late)
    assert done == ["early", "late"] and len(sync.started) == 2


@trio_test
async def test_sync_error_propagates_and_a_later_call_retries():
    sync = FakeSync(fail_first=1)
    group = GroupCommit(sync)
    with pytest.raises(OSError, match="sync 1 failed"):
        await group()
    await group()
    assert len(sync.started) == 2 and len(sync.finished) == 1


@trio_test
async def test_waiters_of_a_failed_sync_are_not_told_it_succeeded():
    sync = FakeSync(duration=0.05, fail_first=1)
    group = GroupCommit(sync)
    outcomes = []

    async def caller(delay: float):
        await trio.sleep(delay)
        arrived = time.monotonic()
        try:
            await group()
        except OSError:
            outcomes.append("error")
        else:
            outcomes.append("ok" if sync.covered(arrived) else "uncovered")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, 0)
        for _ in range(5):
            nursery.start_soon(caller, 0.01)
    assert sorted(outcomes) == ["error"] + ["ok"] * 5


@trio_test
async def test_cancelled_caller_does_not_wedge_later_callers():
    sync = FakeSync(duration=0.2)
    group = GroupCommit(sync)
    with trio.move_on_after(0.05):  # e.g. an interrupted fsync
        await group()
    with trio.fail_after(2):
        await group()
    assert len(sync.finished) == 2
