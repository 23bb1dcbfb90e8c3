"""The circuit breaker shared by S3 and the flash servers, driven by a fake clock and scripted
failures: its decision rules, what it reports, and what it logs."""

import logging

import pytest

from aifs.tiers.breaker import CircuitBreaker, CircuitOpen

NAME = "flash server 127.0.0.1:7000"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def breaker(clock: FakeClock, threshold: int, **kwargs) -> CircuitBreaker:
    return CircuitBreaker(NAME, threshold, cooldown=10, clock=clock, **kwargs)


def fail(breaker: CircuitBreaker, times: int, error: str = "connection refused") -> None:
    for _ in range(times):
        breaker.admit()
        breaker.failed(error)


def transitions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aifs.tiers.breaker"]


def test_opens_after_threshold_consecutive_failures(clock):
    service = breaker(clock, 3)
    fail(service, 2)
    assert (service.state, service.up, service.failures, service.down_since) == ("closed", True, 2, None)
    clock.now += 1
    fail(service, 1)
    assert (service.state, service.up, service.failures, service.down_since) == ("open", False, 3, clock.now)
    expected = r"after 3 failed requests .*next probe in 10\.0 s.*connection refused"
    with pytest.raises(CircuitOpen, match=expected):
        service.admit()


def test_failures_of_requests_in_flight_together_count_once(clock):
    service = breaker(clock, 3)
    started = [service.admit() for _ in range(8)]  # eight concurrent requests...
    clock.now += 0.5
    for at in started:
        service.failed("connection reset", at)  # ...all hit by one blip
    assert service.state == "closed" and service.failures == 1, "one blip is one failure, not eight"
    for _ in range(2):  # two more requests, each begun after the failure before it
        clock.now += 0.1
        service.failed("connection reset", service.admit())
    assert service.state == "open"


def test_a_success_resets_the_count(clock):
    service = breaker(clock, 3)
    fail(service, 2)
    service.admit()
    service.succeeded()
    assert service.failures == 0
    fail(service, 2)
    assert service.state == "closed"


def test_one_probe_after_cooldown_and_success_closes(clock):
    service = breaker(clock, 2)
    fail(service, 2)
    clock.now += 9.9
    with pytest.raises(CircuitOpen):
        service.admit()
    clock.now += 0.1
    service.admit()  # the probe
    assert service.state == "half-open" and not service.up
    with pytest.raises(CircuitOpen, match="probe request is in flight"):
        service.admit()  # only one probe at a time
    service.succeeded()
    assert (service.state, service.up, service.down_since) == ("closed", True, None)
    service.admit()


def test_failed_probe_reopens_for_a_full_cooldown_and_the_outage_keeps_its_start(clock):
    service = breaker(clock, 2)
    fail(service, 2)
    opened = clock.now
    clock.now += 10
    service.admit()
    service.failed("still refused")
    assert service.state == "open" and service.down_since == opened
    clock.now += 9
    with pytest.raises(CircuitOpen, match="still refused") as info:
        service.admit()
    assert info.value.retry_in == pytest.approx(1.0)


def test_a_trip_opens_at_once(clock):
    service = breaker(clock, 5)
    service.trip("the upload process found S3 down")
    assert (service.state, service.failures, service.last_error) == ("open", 5, "the upload process found S3 down")
    with pytest.raises(CircuitOpen):
        service.admit()


def test_an_answer_out_of_band_closes_an_open_breaker(clock):
    """A prober's answer: no request was admitted, yet the service is back."""
    service = breaker(clock, 2)
    fail(service, 2)
    service.succeeded()
    assert (service.state, service.up, service.failures, service.down_since) == ("closed", True, 0, None)
    service.admit()


def test_health_is_what_status_shows(clock):
    service = breaker(clock, 2)
    assert service.health() == {"up": True, "breaker": "closed", "failures": 0, "down_since": None,
                                "last_error": None}
    fail(service, 2, "connection reset by peer")
    assert service.health() == {"up": False, "breaker": "open", "failures": 2, "down_since": clock.now,
                                "last_error": "connection reset by peer"}


def test_one_line_when_it_opens_and_one_when_it_closes(clock, caplog):
    caplog.set_level(logging.WARNING, logger="aifs.tiers.breaker")
    service = breaker(clock, 3)
    fail(service, 3)
    service.trip("found down elsewhere")  # already open: nothing new to say
    clock.now += 10
    service.admit()
    service.failed("still refused")  # a failed probe: still the same outage
    clock.now += 2.2
    service.succeeded()
    service.succeeded()  # closed already
    assert transitions(caplog) == [
        f"{NAME} marked down after 3 consecutive failures (last: connection refused)",
        f"{NAME} is back after 12.2s",
    ]


def test_a_quiet_breaker_says_nothing(clock, caplog):
    caplog.set_level(logging.WARNING, logger="aifs.tiers.breaker")
    service = breaker(clock, 1, announce=False)
    fail(service, 1)
    service.succeeded()
    assert service.state == "closed" and transitions(caplog) == []
