"""Slots for the calls to one back end, handed out by priority: demand reads first.

A reader waiting on a cold block must not queue behind readahead, warmup or
uploads. Each back end (cold tier, remote tier, local I/O
threads) has a fixed number of slots; background work may never take the last
`reserve` of them, so a demand read finds a free slot at once unless other
demand reads hold them, and when a slot frees, the most urgent waiter gets it.
A waiter's priority can be raised while it waits: a demand read that joins a
readahead fetch makes that fetch urgent.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeVar

import trio

T = TypeVar("T")


class Priority(IntEnum):
    DEMAND = 0
    READAHEAD = 1
    WARMUP = 2
    UPLOAD = 3


@dataclass
class Ticket:
    """One caller's place in line, reusable for its successive calls; see `urge`."""

    priority: Priority
    granted: trio.Event = field(default_factory=trio.Event)
    waiting_in: "PriorityLimiter | None" = None

    def urge(self, priority: Priority) -> None:
        """Make this caller at least as urgent as `priority`, also while it waits."""
        if priority < self.priority:
            self.priority = priority
            if self.waiting_in is not None:
                self.waiting_in.grant_free_slots()


class PriorityLimiter:
    def __init__(self, slots: int, reserve: int = 1) -> None:
        self.slots = slots
        self.reserve = min(reserve, slots - 1)
        self.busy = 0
        self._waiting: list[Ticket] = []
        self._threads = trio.CapacityLimiter(slots)

    def _fits(self, priority: Priority) -> bool:
        limit = self.slots if priority == Priority.DEMAND else self.slots - self.reserve
        return self.busy < limit

    async def acquire(self, ticket: Ticket) -> None:
        """Take a slot: at once when one is free and nobody waits (no trip through the
        scheduler, which would cost a small read a tenth of its time), else in turn."""
        if not self._waiting and self._fits(ticket.priority):
            self.busy += 1
            return
        ticket.granted = trio.Event()
        ticket.waiting_in = self
        self._waiting.append(ticket)
        self.grant_free_slots()
        try:
            await ticket.granted.wait()
        except BaseException:
            if ticket.granted.is_set():
                self.release()
            else:
                self._waiting.remove(ticket)
            raise
        finally:
            ticket.waiting_in = None

    def release(self) -> None:
        self.busy -= 1
        self.grant_free_slots()

    def grant_free_slots(self) -> None:
        """Hand free slots to waiters, most urgent (then oldest) first."""
        while self._waiting:
            ticket = min(self._waiting, key=lambda t: t.priority)
            if not self._fits(ticket.priority):
                return
            self._waiting.remove(ticket)
            self.busy += 1
            ticket.granted.set()

    @asynccontextmanager
    async def slot(self, ticket: Ticket) -> AsyncIterator[None]:
        """Hold a slot for the body of the `async with`, once the ticket's turn comes."""
        await self.acquire(ticket)
        try:
            yield
        finally:
            self.release()

    async def run(self, ticket: Ticket, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a worker thread once the ticket holds a slot."""
        async with self.slot(ticket):
            return await trio.to_thread.run_sync(fn, *args, limiter=self._threads)
