"""Back-end slots go to demand reads first; background work never takes the reserved ones."""

import trio
import trio.testing

from aifs.tiers.priority import Priority, PriorityLimiter, Ticket
from tests.unit.conftest import trio_test


async def hold(limiter: PriorityLimiter, priority: Priority, log: list, name: str, release: trio.Event) -> None:
    await limiter.acquire(Ticket(priority))
    log.append(name)
    await release.wait()
    limiter.release()


@trio_test
async def test_background_work_leaves_the_reserved_slots_to_demand():
    limiter = PriorityLimiter(4, reserve=1)
    log: list[str] = []
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(hold, limiter, Priority.UPLOAD, log, f"upload{i}", release)
        await trio.testing.wait_all_tasks_blocked()
        assert len(log) == 3 and limiter.busy == 3, "the fourth slot is kept for demand"
        nursery.start_soon(hold, limiter, Priority.DEMAND, log, "demand", release)
        await trio.testing.wait_all_tasks_blocked()
        assert log[-1] == "demand", "a demand read finds the reserved slot at once"
        release.set()
    assert sorted(log) == ["demand", "upload0", "upload1", "upload2", "upload3"] and limiter.busy == 0


@trio_test
async def test_a_freed_slot_goes_to_the_most_urgent_waiter():
    limiter = PriorityLimiter(1, reserve=0)
    log: list[str] = []
    first, rest = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, limiter, Priority.DEMAND, log, "holder", first)
        await trio.testing.wait_all_tasks_blocked()
        for priority in (Priority.UPLOAD, Priority.WARMUP, Priority.READAHEAD, Priority.DEMAND):
            nursery.start_soon(hold, limiter, priority, log, priority.name, rest)
            await trio.testing.wait_all_tasks_blocked()
        first.set()
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["holder", "DEMAND"]
        rest.set()
    assert log == ["holder", "DEMAND", "READAHEAD", "WARMUP", "UPLOAD"]


@trio_test
async def test_urging_a_waiting_ticket_moves_it_ahead():
    limiter = PriorityLimiter(1, reserve=0)
    blocker = Ticket(Priority.DEMAND)
    await limiter.acquire(blocker)
    granted: list[str] = []
    readahead, warmup = Ticket(Priority.READAHEAD), Ticket(Priority.WARMUP)

    async def wait(ticket: Ticket, name: str) -> None:
        await limiter.acquire(ticket)
        granted.append(name)
        limiter.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, readahead, "readahead")
        nursery.start_soon(wait, warmup, "warmup")
        await trio.testing.wait_all_tasks_blocked()
        warmup.urge(Priority.DEMAND)  # a demand read joined the warmup's fetch
        limiter.release()
    assert granted == ["warmup", "readahead"]


@trio_test
async def test_a_cancelled_waiter_gives_up_its_place():
    limiter = PriorityLimiter(1, reserve=0)
    await limiter.acquire(Ticket(Priority.DEMAND))
    with trio.move_on_after(0.01):
        await limiter.acquire(Ticket(Priority.DEMAND))
    limiter.release()
    assert limiter.busy == 0
    with trio.fail_after(1):
        assert await limiter.run(Ticket(Priority.UPLOAD), lambda: 42) == 42
