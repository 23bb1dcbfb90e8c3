"""Memory shared by a block server's connections: what requests may hold at once."""

import trio


class ByteBudget:
    """Bytes held at once, shared by every connection; a request waits its turn for room.

    Turns are first come, first served, so a large request is not starved by a
    stream of small ones; a request that fits while nobody waits takes its bytes
    without a trip through the scheduler.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._turn = trio.Lock()  # held by the request waiting for room; trio's Lock is fair
        self._freed = trio.Event()

    async def take(self, nbytes: int) -> None:
        """Wait until `nbytes` fit, and hold them; ValueError when they never could."""
        if nbytes > self.capacity:
            raise ValueError(f"{nbytes} bytes are more than the server's request memory of {self.capacity}")
        if not self._turn.locked() and self.used + nbytes <= self.capacity:
            self.used += nbytes
            return
        async with self._turn:
            while self.used + nbytes > self.capacity:
                await self._freed.wait()
            self.used += nbytes

    def give_back(self, nbytes: int) -> None:
        if not nbytes:
            return
        self.used -= nbytes
        self._freed.set()
        self._freed = trio.Event()
