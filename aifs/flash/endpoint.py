"""One server as the tier sees it: its connection, its circuit breaker, and the retry rules.

A request that fails or times out is retried on the same server with
exponential backoff, but never past `bound` seconds in all, so a read waits
at most that long on a dead server before the tier moves to the next replica.
An error answer (missing block, refused put, corrupt copy) proves the server
alive: it is not retried and resets the failure count. Each attempt goes
through the server's breaker: none is sent while the server is down, but for
the breaker's probe after its cooldown.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from aifs.rdma.transport import Address, Connection, RemoteError, TransportError
from aifs.tiers.breaker import CircuitBreaker, CircuitOpen
from aifs.tiers.checksum import CorruptBlock

log = logging.getLogger(__name__)

T = TypeVar("T")

FAILURES_TO_DOWN = 3


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    timeout: float = 0.5       # one request
    bound: float = 1.0         # every attempt at one server for one call, pauses included
    attempts: int = 3
    backoff: float = 0.01      # the first pause; it doubles after each failure
    max_backoff: float = 0.2


class ServerUnavailable(Exception):
    """The server is marked down, or no attempt within the bound got an answer."""


class _Attempts:
    """One call's attempts at a server under its policy: how long each may take, the pause
    after a failure, and when to give up."""

    def __init__(self, handle: "ServerHandle") -> None:
        self._handle = handle
        self._deadline = time.monotonic() + handle.policy.bound
        self._pause = handle.policy.backoff
        self._left = handle.policy.attempts
        self._started = 0.0  # when the breaker admitted the attempt in flight
        self._last: BaseException | None = None

    def next(self) -> float | None:
        """The next attempt's timeout; None when the server is down or time or attempts ran out."""
        left = self._deadline - time.monotonic()
        if left <= 0 or self._left <= 0:
            return None
        try:
            self._started = self._handle.breaker.admit()
        except CircuitOpen as e:
            self._last = e
            return None
        self._left -= 1
        return min(self._handle.policy.timeout, left)

    def failed(self, error: BaseException) -> float:
        """Count the failure against the server; how long to pause before the next attempt."""
        self._last = error
        self._handle.breaker.failed(str(error) or type(error).__name__, self._started)
        if not self._left:
            return 0.0
        pause = max(0.0, min(self._pause, self._deadline - time.monotonic()))
        self._pause = min(self._pause * 2, self._handle.policy.max_backoff)
        return pause

    def unavailable(self) -> "ServerUnavailable":
        return ServerUnavailable(f"{self._handle.breaker.name}: {self._last or 'marked down'}")


class ServerHandle:
    """A server behind its circuit breaker: calls with the policy's retries, and the probe
    that brings the server back."""

    def __init__(self, address: Address, connection: Connection, policy: RetryPolicy, breaker: CircuitBreaker) -> None:
        self.address = address
        self.name = str(address)
        self.connection = connection
        self.policy = policy
        self.breaker = breaker
        self.answered = 0  # requests that got an answer, for status and tests
        self.received_bytes = 0  # block bytes read from the server, for status

    @property
    def up(self) -> bool:
        return self.breaker.up

    def call(self, request: Callable[[Connection, float], T]) -> T:
        """`request(connection, timeout)` with retries; raises ServerUnavailable or the server's error answer."""
        attempts = _Attempts(self)
        while (timeout := attempts.next()) is not None:
            try:
                result = request(self.connection, timeout)
            except (RemoteError, CorruptBlock):
                self._answered()
                raise
            except TransportError as e:
                time.sleep(attempts.failed(e))
                continue
            except BaseException as e:  # cancelled, or a fault of ours: an admitted probe must end
                attempts.failed(e)
                raise
            self._answered()
            return result
        raise attempts.unavailable()

    async def call_on_loop(self, request: Callable[[float], Awaitable[T]]) -> T:
        """`call` for a request that runs on the trio loop: `await request(timeout)`."""
        attempts = _Attempts(self)
        while (timeout := attempts.next()) is not None:
            try:
                result = await request(timeout)
            except (RemoteError, CorruptBlock):
                self._answered()
                raise
            except TransportError as e:
                await trio.sleep(attempts.failed(e))
                continue
            except BaseException as e:  # cancelled, or a fault of ours: an admitted probe must end
                attempts.failed(e)
                raise
            self._answered()
            return result
        raise attempts.unavailable()

    def _answered(self) -> None:
        self.answered += 1
        self.breaker.succeeded()

    def open(self) -> None:
        """Connect ahead of the first request; a server that is down now is found out by that request."""
        try:
            self.connection.open(self.policy.timeout)
        except TransportError as e:
            log.debug("%s: not connected ahead: %s", self.breaker.name, e)

    def probe(self) -> None:
        """One stat request, for the prober: it bypasses the breaker (the server is down) and
        closes it when the server answers; a probe that fails leaves the breaker as it was."""
        try:
            self.connection.stat(self.policy.timeout)
        except TransportError:
            return
        self.breaker.succeeded()
