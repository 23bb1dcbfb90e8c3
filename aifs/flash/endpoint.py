"""One flash server as the tier sees it: its connection, its circuit breaker, and the retry rules.

A request that fails or times out is retried on the same server with
exponential backoff, but never past `bound` seconds in all, so a read waits
at most that long on a dead server before the tier moves to the next replica.
An error answer (missing block, refused put, corrupt copy) proves the server
alive: it is not retried and resets the failure count.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from aifs.flash.health import CircuitBreaker
from aifs.rdma.transport import Address, Connection, RemoteError, TransportError
from aifs.tiers.checksum import CorruptBlock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    timeout: float = 0.5       # one request
    bound: float = 1.0         # every attempt at one server for one call, pauses included
    attempts: int = 3
    backoff: float = 0.01      # the first pause; it doubles after each failure
    max_backoff: float = 0.2


class ServerUnavailable(Exception):
    """The server is marked down, or no attempt within the bound got an answer."""


class ServerHandle:
    def __init__(self, address: Address, connection: Connection, policy: RetryPolicy, breaker: CircuitBreaker) -> None:
        self.address = address
        self.name = str(address)
        self.connection = connection
        self.policy = policy
        self.breaker = breaker
        self.answered = 0  # requests that got an answer, for status and tests

    @property
    def up(self) -> bool:
        return self.breaker.up

    def call(self, request: Callable[[Connection, float], T]) -> T:
        """`request(connection, timeout)` with retries; raises ServerUnavailable or the server's error answer."""
        policy = self.policy
        deadline = time.monotonic() + policy.bound
        pause = policy.backoff
        last: Exception | None = None
        for attempt in range(policy.attempts):
            left = deadline - time.monotonic()
            if not self.breaker.up or left <= 0:
                break
            try:
                result = request(self.connection, min(policy.timeout, left))
            except (RemoteError, CorruptBlock):
                self._answered()
                raise
            except TransportError as e:
                last = e
                self.breaker.failure(e)
                if attempt + 1 < policy.attempts:
                    time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
                    pause = min(pause * 2, policy.max_backoff)
                continue
            self._answered()
            return result
        raise ServerUnavailable(f"flash server {self.name}: {last or 'marked down'}")

    def _answered(self) -> None:
        self.answered += 1
        self.breaker.success()

    def probe(self) -> None:
        """One stat request, bypassing the breaker: closes it when the server answers."""
        try:
            self.connection.stat(self.policy.timeout)
        except TransportError:
            return
        self.breaker.success()
