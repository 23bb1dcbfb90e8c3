"""Which S3 failures are worth retrying, and the bounded retry loop every request runs in.

botocore's own retries are switched off (see s3_client), so that each attempt on
the wire is seen here: it is counted by the circuit breaker, and the total time
one operation can spend failing is bounded by `retries` and the backoff below.
"""

import random
import time
from collections.abc import Callable
from typing import TypeVar

from botocore import exceptions as boto
from botocore.exceptions import ClientError

from aifs.tiers.s3_breaker import CircuitBreaker

T = TypeVar("T")

BASE_DELAY_S = 0.1
MAX_DELAY_S = 5.0
# Error codes S3 and its look-alikes use for "slow down" and "try again".
_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestTimeout", "InternalError", "ServiceUnavailable",
})
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
# Timeouts, refused and reset connections, bodies cut short.
_NETWORK_ERRORS = (boto.ConnectionError, boto.HTTPClientError, boto.IncompleteReadError)


def is_transient(exc: BaseException) -> bool:
    """A failure a later attempt may not see; anything else (403, 404, bad request) is final."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status in _TRANSIENT_STATUS or error_code(exc) in _TRANSIENT_CODES
    return isinstance(exc, _NETWORK_ERRORS)


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def backoff(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Full jitter: many clients retrying at once spread out instead of hammering in step."""
    return rand() * min(MAX_DELAY_S, BASE_DELAY_S * 2**attempt)


class Retrier:
    """Runs requests through the breaker, retrying transient failures up to `retries` times."""

    def __init__(self, retries: int, breaker: CircuitBreaker,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.retries = retries
        self.breaker = breaker
        self._sleep = sleep

    def call(self, request: Callable[[], T]) -> T:
        """The request's result, or its last error; CircuitOpen once the breaker trips.

        A final S3 answer (an error response that is not transient) proves the
        service is up, so it counts as a success for the breaker.
        """
        attempt = 0
        while True:
            started = self.breaker.admit()
            try:
                result = request()
            except BaseException as exc:
                transient = is_transient(exc)
                if isinstance(exc, ClientError) and not transient:
                    self.breaker.succeeded()
                    raise
                self.breaker.failed(str(exc), started)
                if not transient or attempt >= self.retries:
                    raise
            else:
                self.breaker.succeeded()
                return result
            self._sleep(backoff(attempt))
            attempt += 1
