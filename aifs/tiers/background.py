"""Work a mount does around the remote tier without waiting for it: offers, unpins, usage
figures, and copies of blocks found remotely down to NVMe.

Any remote call may take up to the tier's read bound on a server that just died,
so the event loop never makes one itself. Offers of blocks go to a few worker
threads through a bounded backlog: when the servers are slower than blocks
arrive, new offers are dropped (and counted) instead of queueing without end.
Nothing is lost by that: the remote tier is a cache, and a block not offered now
is read from the cold tier later and offered again then. For the same reason the
workers are daemon threads: `close` gives queued calls a few seconds, and a process
that exits without it simply drops them.
"""

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

WORKERS = 2
MAX_CALLS = 1024          # calls waiting or running
MAX_BYTES = 64 << 20      # block bytes those calls hold
DRAIN_S = 10.0            # how long close() lets queued calls finish
USAGE_TTL = 10.0
UNLIMITED = 1 << 50       # what status shows for "auto" before any server answered (1 PiB, like a bucket)


_Call = tuple[Callable[..., object], tuple, int]


class BackgroundCalls:
    """Runs calls on worker threads; `submit` never blocks and drops a call when the backlog is full."""

    def __init__(self, workers: int = WORKERS, max_calls: int = MAX_CALLS, max_bytes: int = MAX_BYTES,
                 name: str = "aifs-remote") -> None:
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self.dropped = 0
        self.failed = 0
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._calls = 0
        self._bytes = 0
        self._closed = False
        self._abandoned = False
        self._workers = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def submit(self, fn: Callable[..., object], *args: object, nbytes: int = 0) -> bool:
        """Queue `fn(*args)`, which holds `nbytes` of data until it ran; False when dropped."""
        with self._lock:
            if self._closed or self._calls >= self.max_calls or self._bytes + nbytes > self.max_bytes:
                self.dropped += 1
                return False
            self._calls += 1
            self._bytes += nbytes
        self._queue.put((fn, args, nbytes))
        return True

    def _work(self) -> None:
        while (call := self._queue.get()) is not None:
            self._run(*call)

    def _run(self, fn: Callable[..., object], args: tuple, nbytes: int) -> None:
        failed = dropped = False
        try:
            if self._abandoned:
                dropped = True
            else:
                fn(*args)
        except Exception as e:  # a cache call that failed must not stop the worker
            failed = True
            log.warning("remote tier call %s failed: %r", getattr(fn, "__name__", fn), e)
            log.debug("remote tier call %s failed", getattr(fn, "__name__", fn), exc_info=True)
        finally:
            with self._lock:
                self.failed += failed
                self.dropped += dropped
                self._calls -= 1
                self._bytes -= nbytes
                if not self._calls:
                    self._idle.notify_all()

    @property
    def pending(self) -> int:
        return self._calls

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued call has run; False when `timeout` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._calls == 0, timeout)

    def close(self, drain: float = DRAIN_S) -> None:
        """Refuse new calls, give queued ones `drain` seconds, then drop the rest.

        Workers stuck in a call past the drain are left behind (daemon threads), not waited for.
        """
        with self._lock:
            self._closed = True
        drained = self.wait_idle(drain)
        if not drained:
            self._abandoned = True
            log.warning("dropping %d remote tier calls still queued after %.0f s", self._calls, drain)
        for _ in self._workers:
            self._queue.put(None)
        if drained:
            for worker in self._workers:
                worker.join()


class _Sized(Protocol):
    name: str
    capacity: int

    def used(self) -> int: ...


class RemoteUsage:
    """The remote tier as `aifs status` shows it: the servers' last figures, never a network wait.

    Reading `capacity` or `used()` asks the servers again in the background once
    the figures are older than `ttl`. An explicit `capacity` from the config
    replaces the servers' total (the servers still enforce their own budgets).
    """

    def __init__(self, tier: _Sized, calls: BackgroundCalls, capacity: int | None = None,
                 ttl: float = USAGE_TTL) -> None:
        self.name = tier.name
        self._tier = tier
        self._calls = calls
        self._configured = capacity
        self._ttl = ttl
        self._known: tuple[int, int] | None = None  # (capacity, used), replaced whole by the worker
        self._asked = -math.inf
        self.refresh()

    def refresh(self) -> None:
        """Ask the servers again (in the background) unless that was done less than `ttl` ago."""
        now = time.monotonic()
        if now - self._asked >= self._ttl:
            self._asked = now
            self._calls.submit(self._ask)

    def _ask(self) -> None:
        self._known = (self._tier.capacity, self._tier.used())

    @property
    def capacity(self) -> int:
        if self._configured is not None:
            return self._configured
        self.refresh()
        known = self._known
        return known[0] if known is not None and known[0] > 0 else UNLIMITED

    def used(self) -> int:
        self.refresh()
        known = self._known
        return known[1] if known is not None else 0
