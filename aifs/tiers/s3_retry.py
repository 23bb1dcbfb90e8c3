"""Which S3 failures are worth retrying, the bounded retry loop every request runs in,
and the errors an operation that failed for good raises.

botocore's own retries are switched off (see s3_client), so that each attempt on
the wire is seen here: it is counted by the circuit breaker, and the total time
one operation can spend failing is bounded by `retries` and the backoff below.
"""

import errno
import random
import time
from collections.abc import Callable
from typing import TypeVar

from botocore import exceptions as boto
from botocore.exceptions import BotoCoreError, ClientError

from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.breaker import CircuitBreaker, CircuitOpen

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


class S3Error(OSError):
    """An S3 operation failed for good (EIO); `code` is S3's error code when it answered,
    `transient` says the service itself failed (down, throttling, cut off) rather than
    refused the request."""

    def __init__(self, message: str, code: str = "", transient: bool = False) -> None:
        super().__init__(errno.EIO, message)
        self.code = code
        self.transient = transient


class S3Unavailable(S3Error):
    """The circuit breaker is open: S3 counts as down and no request was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


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

    def run(self, where: str, request: Callable[[], T]) -> T:
        """`call`, with every failure an S3Error naming the operation (`where`)."""
        try:
            return self.call(request)
        except CircuitOpen as exc:
            raise S3Unavailable(f"{where}: S3 {exc}") from None
        except (BotoCoreError, ClientError) as exc:
            code = error_code(exc) if isinstance(exc, ClientError) else ""
            transient = is_transient(exc)
            tries = f" (gave up after {self.retries + 1} attempts)" if transient else ""
            raise S3Error(f"{where} failed{tries}: {exc}", code, transient) from exc


def retrier_for(settings: S3Settings, announce: bool = True) -> Retrier:
    """The retries and circuit breaker `settings` ask for; `announce` as for CircuitBreaker."""
    endpoint = settings.endpoint or f"AWS {settings.region}"
    breaker = CircuitBreaker(f"S3 endpoint {endpoint} (bucket {settings.bucket})", settings.breaker_failures,
                             settings.breaker_cooldown, announce=announce)
    return Retrier(settings.retries, breaker)
