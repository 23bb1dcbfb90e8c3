"""A circuit breaker: once a service has failed N requests in a row, stop waiting on it.

One breaker guards one service: the S3 endpoint, or one server of a set (a
flash block server, a peer node), whose callers then skip it while it is down.
While the breaker is open every request fails at once instead of spending its
timeouts and retries on a dead service; after a cooldown one probe request is
let through, and its outcome closes the breaker or opens it for another cooldown.
A service may also be found alive out of band (a prober's answer): succeeded()
closes the breaker whenever it is called.

"In a row" means each failed request began after the previous failure was seen:
requests in flight together that fail in one short blip (a reset burst, a
moment of refused connections) are one piece of evidence, not many, so a
blip under load does not take the service away for a whole cooldown.

The breaker logs one warning when it opens and one when it closes, naming the
service as its caller does ("flash server 10.0.0.7:7000"). Thread-safe.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class CircuitOpen(Exception):
    """The service is considered down; no request was sent."""

    def __init__(self, failures: int, retry_in: float, last_error: str) -> None:
        when = f"next probe in {retry_in:.1f} s" if retry_in > 0 else "a probe request is in flight"
        super().__init__(f"unavailable after {failures} failed requests in a row ({when}); "
                         f"last error: {last_error}")
        self.retry_in = retry_in


class CircuitBreaker:
    """`name` says what the service is, in log lines; `announce=False` keeps the breaker quiet
    where another breaker follows this one and speaks for both."""

    def __init__(self, name: str, threshold: int, cooldown: float,
                 clock: Callable[[], float] = time.monotonic, announce: bool = True) -> None:
        self.name = name
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._announce = announce
        self._lock = threading.Lock()
        self._failures = 0
        self._last_error = ""
        self._last_failure_at = float("-inf")
        self._opened_at: float | None = None  # when the current cooldown began
        self._down_since: float | None = None  # when it opened, failed probes since or not
        self._probing = False

    @property
    def state(self) -> str:
        """closed (requests flow), open (they fail fast) or half-open (one probe is out)."""
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened_at is None:
            return "closed"
        return "half-open" if self._probing else "open"

    @property
    def up(self) -> bool:
        """Closed: requests go to the service. Read without the lock: a stale answer costs one request."""
        return self._opened_at is None

    @property
    def failures(self) -> int:
        """Failed requests in the current streak (0 after a success)."""
        return self._failures

    @property
    def down_since(self) -> float | None:
        """When the breaker opened (on its clock, time.monotonic by default); None while closed."""
        return self._down_since

    @property
    def last_error(self) -> str:
        """The error of the last failed request ("" before any failed)."""
        with self._lock:
            return self._last_error

    def health(self) -> dict[str, Any]:
        """One consistent look at the breaker, for status reports."""
        with self._lock:
            return {"up": self._opened_at is None, "breaker": self._state(), "failures": self._failures,
                    "down_since": self._down_since, "last_error": self._last_error or None}

    def admit(self) -> float:
        """Raise CircuitOpen unless a request may be sent now; the caller must then report
        its outcome with succeeded() or failed(), giving failed() the time returned here."""
        with self._lock:
            now = self._clock()
            if self._opened_at is None:
                return now
            retry_in = self._opened_at + self.cooldown - now
            if retry_in > 0 or self._probing:
                raise CircuitOpen(self._failures, max(retry_in, 0.0), self._last_error)
            self._probing = True
            return now

    def succeeded(self) -> None:
        """The service answered: the streak ends and the breaker closes."""
        with self._lock:
            down_since = self._down_since
            self._failures = 0
            self._opened_at = self._down_since = None
            self._probing = False
            back_after = None if down_since is None else self._clock() - down_since
        if back_after is not None and self._announce:
            log.warning("%s is back after %.1fs", self.name, back_after)

    def trip(self, error: str) -> None:
        """Open now: another client of the same service (the upload process) found it down."""
        with self._lock:
            self._last_error = error
            self._failures = max(self._failures, self.threshold)
            self._last_failure_at = self._clock()
            opened, failures = self._open(self._last_failure_at), self._failures
        if opened:
            self._say_down(failures, error)

    def failed(self, error: str, started: float | None = None) -> None:
        """A failed probe reopens the breaker at once; otherwise it opens at the threshold,
        counting only failures of requests `started` after the last failure was seen."""
        with self._lock:
            now = self._clock()
            self._last_error = error
            if not self._probing and started is not None and started < self._last_failure_at:
                return  # in flight beside a request that already failed: the same blip
            self._failures += 1
            self._last_failure_at = now
            opened = (self._probing or self._failures >= self.threshold) and self._open(now)
            failures = self._failures
        if opened:
            self._say_down(failures, error)

    def _open(self, now: float) -> bool:
        """Start a cooldown (under the lock); whether the breaker was closed until now."""
        was_closed = self._opened_at is None
        self._opened_at = now
        self._probing = False
        if was_closed:
            self._down_since = now
        return was_closed

    def _say_down(self, failures: int, error: str) -> None:
        if self._announce:
            log.warning("%s marked down after %d consecutive failures (last: %s)", self.name, failures, error)
