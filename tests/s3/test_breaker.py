"""The S3 retry loop through its circuit breaker, driven by a fake clock and scripted failures
(no S3 involved: these are the pure decision rules; the breaker's own are in tests/test_breaker.py)."""

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from test_breaker import FakeClock

from aifs.tiers.breaker import CircuitBreaker, CircuitOpen
from aifs.tiers.s3_retry import BASE_DELAY_S, MAX_DELAY_S, Retrier, backoff, is_transient


def client_error(code: str, status: int) -> ClientError:
    response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetObject")


REFUSED = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_transient_and_final_errors():
    assert is_transient(REFUSED)
    assert is_transient(ReadTimeoutError(endpoint_url="http://x"))
    assert is_transient(client_error("SlowDown", 503))
    assert is_transient(client_error("InternalError", 500))
    assert is_transient(client_error("Throttling", 400))
    assert not is_transient(client_error("AccessDenied", 403))
    assert not is_transient(client_error("NoSuchBucket", 404))
    assert not is_transient(client_error("NotImplemented", 501))
    assert not is_transient(ValueError("bug"))


def test_backoff_grows_exponentially_with_full_jitter_and_a_cap():
    ceilings = [backoff(n, rand=lambda: 1.0) for n in range(3)]
    assert ceilings == [BASE_DELAY_S, 2 * BASE_DELAY_S, 4 * BASE_DELAY_S]
    assert backoff(30, rand=lambda: 1.0) == MAX_DELAY_S
    assert backoff(5, rand=lambda: 0.0) == 0.0


class Script:
    """A request that raises the given errors in turn, then returns "ok"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def retrier(clock: FakeClock, retries: int, threshold: int = 100) -> tuple[Retrier, list[float]]:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    return Retrier(retries, CircuitBreaker("S3 endpoint", threshold, cooldown=10, clock=clock), sleep), slept


def test_transient_errors_are_retried_with_backoff(clock):
    run, slept = retrier(clock, retries=3)
    request = Script(REFUSED, client_error("SlowDown", 503))
    assert run.call(request) == "ok"
    assert request.calls == 3 and len(slept) == 2
    assert all(0 <= s <= BASE_DELAY_S * 2 ** i for i, s in enumerate(slept))
    assert run.breaker.state == "closed"


def test_retries_are_bounded_and_the_last_error_surfaces(clock):
    run, slept = retrier(clock, retries=2)
    request = Script(*[REFUSED] * 5)
    with pytest.raises(EndpointConnectionError):
        run.call(request)
    assert request.calls == 3 and len(slept) == 2


def test_final_errors_are_not_retried_and_prove_the_service_is_up(clock):
    run, _ = retrier(clock, retries=5, threshold=2)
    run.breaker.admit()
    run.breaker.failed("refused")
    request = Script(client_error("AccessDenied", 403))
    with pytest.raises(ClientError):
        run.call(request)
    assert request.calls == 1
    run.breaker.admit()
    run.breaker.failed("refused")
    assert run.breaker.state == "closed"  # the 403 reset the count


def test_breaker_stops_the_retry_loop_and_then_fails_fast(clock):
    run, _ = retrier(clock, retries=10, threshold=3)
    request = Script(*[REFUSED] * 20)
    with pytest.raises(CircuitOpen):
        run.call(request)
    assert request.calls == 3
    with pytest.raises(CircuitOpen):
        run.call(request)
    assert request.calls == 3  # nothing sent while open
    clock.now += 10
    with pytest.raises(CircuitOpen):
        run.call(request)  # the probe fails and reopens the breaker
    assert request.calls == 4
    clock.now += 10
    assert run.call(Script()) == "ok"
    assert run.breaker.state == "closed"
