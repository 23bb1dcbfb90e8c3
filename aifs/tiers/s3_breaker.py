"""A circuit breaker: once a service has failed N requests in a row, stop waiting on it.

While the breaker is open every request fails at once instead of spending its
timeouts and retries on a dead endpoint; after a cooldown one probe request is
let through, and its outcome closes the breaker or opens it for another cooldown.

"In a row" means each failed request began after the previous failure was seen:
requests in flight together that fail in one short blip (a reset burst, a
moment of refused connections) are one piece of evidence, not many, so a
blip under load does not take the service away for a whole cooldown.
Thread-safe: the S3 tier calls it from many worker threads.
"""

import threading
import time
from collections.abc import Callable


class CircuitOpen(Exception):
    """The service is considered down; no request was sent."""

    def __init__(self, failures: int, retry_in: float, last_error: str) -> None:
        when = f"next probe in {retry_in:.1f} s" if retry_in > 0 else "a probe request is in flight"
        super().__init__(f"unavailable after {failures} failed requests in a row ({when}); "
                         f"last error: {last_error}")
        self.retry_in = retry_in


class CircuitBreaker:
    def __init__(self, threshold: int, cooldown: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._last_error = ""
        self._last_failure_at = float("-inf")
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        """closed (requests flow), open (they fail fast) or half-open (one probe is out)."""
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "half-open" if self._probing else "open"

    @property
    def last_error(self) -> str:
        """The error of the last failed request ("" before any failed)."""
        with self._lock:
            return self._last_error

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
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._probing = False

    def trip(self, error: str) -> None:
        """Open now: another client of the same service (the upload process) found it down."""
        with self._lock:
            self._last_error = error
            self._failures = max(self._failures, self.threshold)
            self._last_failure_at = self._opened_at = self._clock()
            self._probing = False

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
            if self._probing or self._failures >= self.threshold:
                self._opened_at = now
                self._probing = False
