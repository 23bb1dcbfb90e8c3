"""Per-server health: a circuit breaker, and a prober that brings servers back.

After `threshold` consecutive failed requests a server is marked down: the
tier stops sending it requests (placement skips it) so reads stop paying its
timeouts. A prober thread asks each down server for its stat every
`interval` seconds and closes the circuit when one answers.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

FAILURES_TO_DOWN = 3


class CircuitBreaker:
    """Thread-safe; `up` may be read without the lock (a stale answer costs one request at most)."""

    def __init__(self, name: str, threshold: int = FAILURES_TO_DOWN) -> None:
        self.name = name
        self.threshold = threshold
        self.up = True
        self.failures = 0
        self.down_since: float | None = None
        self._lock = threading.Lock()

    def success(self) -> None:
        with self._lock:
            self.failures = 0
            if self.up:
                return
            self.up, down_for, self.down_since = True, time.monotonic() - (self.down_since or 0.0), None
        log.warning("flash server %s is back after %.1fs", self.name, down_for)

    def failure(self, error: BaseException) -> None:
        with self._lock:
            self.failures += 1
            if not self.up or self.failures < self.threshold:
                return
            self.up, self.down_since = False, time.monotonic()
        log.warning("flash server %s marked down after %d consecutive failures (last: %s)",
                    self.name, self.threshold, error)


class Prober:
    """A daemon thread that calls `probe(server)` for each down server every `interval` seconds."""

    def __init__(self, down: Callable[[], Iterable[str]], probe: Callable[[str], None], interval: float) -> None:
        self._down = down
        self._probe = probe
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aifs-flash-prober", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for server in list(self._down()):
                self._probe(server)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
