"""A flash server's retries, read bound, circuit breaker and prober, against scripted connections."""

from __future__ import annotations

import time

import pytest
import trio
from test_breaker import FakeClock

from aifs.flash.endpoint import FAILURES_TO_DOWN, RetryPolicy, ServerHandle, ServerUnavailable
from aifs.rdma.transport import Address, BlockMissing, TransportError
from aifs.tiers.breaker import CircuitBreaker
from aifs.tiers.prober import Prober

COOLDOWN_S = 60.0  # longer than any test: a request is never the breaker's probe unless the clock says so


class Scripted:
    """A connection whose stat() follows a script: 'ok', 'fail' (at once) or 'hang' (for the timeout)."""

    def __init__(self, *script: str) -> None:
        self.script = list(script)
        self.calls: list[tuple[float, float]] = []  # (when, timeout given)

    def stat(self, timeout: float) -> str:
        self.calls.append((time.monotonic(), timeout))
        step = self.script.pop(0) if self.script else "ok"
        if step == "hang":
            time.sleep(timeout)
            raise TransportError("timed out")
        if step == "fail":
            raise TransportError("connection refused")
        if step == "missing":
            raise BlockMissing(1)
        return "answer"


def handle(conn: Scripted, clock=time.monotonic, **policy) -> ServerHandle:
    breaker = CircuitBreaker("flash server 127.0.0.1:1", FAILURES_TO_DOWN, COOLDOWN_S, clock=clock)
    return ServerHandle(Address("127.0.0.1", 1), conn, RetryPolicy(**policy), breaker)


def stat(connection: Scripted, timeout: float) -> str:
    return connection.stat(timeout)


def take_down(server: ServerHandle) -> None:
    with pytest.raises(ServerUnavailable):
        server.call(stat)
    assert not server.up


def test_a_failed_request_is_retried_with_growing_pauses():
    conn = Scripted("fail", "fail", "ok")
    server = handle(conn, backoff=0.02, bound=5.0)
    assert server.call(lambda c, t: c.stat(t)) == "answer"
    (t0, _), (t1, _), (t2, _) = conn.calls
    assert 0.02 <= t1 - t0 < 0.2 and 0.04 <= t2 - t1 < 0.3
    assert server.up and server.breaker.failures == 0  # a success ends the streak


def test_a_dead_server_never_holds_a_call_longer_than_the_bound():
    conn = Scripted("hang", "hang", "hang")
    server = handle(conn, timeout=0.3, bound=0.5)
    started = time.monotonic()
    with pytest.raises(ServerUnavailable):
        server.call(lambda c, t: c.stat(t))
    assert time.monotonic() - started < 0.5 + 0.1
    assert all(timeout <= 0.3 for _, timeout in conn.calls)
    assert sum(timeout for _, timeout in conn.calls) <= 0.5 + 1e-6


def test_three_consecutive_failures_open_the_circuit():
    conn = Scripted("fail", "fail", "fail", "ok")
    server = handle(conn, backoff=0.001)
    with pytest.raises(ServerUnavailable):
        server.call(lambda c, t: c.stat(t))
    assert not server.up and len(conn.calls) == 3
    with pytest.raises(ServerUnavailable):  # while down, no request is sent at all
        server.call(lambda c, t: c.stat(t))
    assert len(conn.calls) == 3
    server.probe()
    assert server.up and server.call(lambda c, t: c.stat(t)) == "answer"


def test_an_error_answer_is_not_retried_and_proves_the_server_alive():
    conn = Scripted("fail", "fail", "missing")
    server = handle(conn, backoff=0.001)
    with pytest.raises(BlockMissing):
        server.call(lambda c, t: c.stat(t))
    assert server.breaker.failures == 0 and server.answered == 1 and len(conn.calls) == 3


def test_the_prober_brings_a_server_back_when_it_answers():
    conn = Scripted("fail", "fail", "fail", "fail", "ok")
    server = handle(conn, backoff=0.001)
    with pytest.raises(ServerUnavailable):
        server.call(lambda c, t: c.stat(t))
    prober = Prober(lambda: [] if server.up else ["s"], lambda name: server.probe(), interval=0.05)
    try:
        deadline = time.monotonic() + 2
        while not server.up and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.up and len(conn.calls) == 5  # one failed probe, then one that answered
    finally:
        prober.close()


def test_while_down_a_call_fails_at_once_naming_the_server():
    conn = Scripted("fail", "fail", "fail")
    server = handle(conn, backoff=0.001)
    take_down(server)
    with pytest.raises(ServerUnavailable, match=r"^flash server 127\.0\.0\.1:1: unavailable after 3 failed "
                                                r"requests in a row \(next probe in .*connection refused"):
        server.call(stat)
    assert len(conn.calls) == 3


def test_after_the_cooldown_one_request_is_the_probe():
    clock = FakeClock()
    conn = Scripted("fail", "fail", "fail", "ok")
    server = handle(conn, clock=clock, backoff=0.001)
    take_down(server)
    clock.now += COOLDOWN_S
    assert server.call(stat) == "answer"
    assert server.up and server.breaker.state == "closed" and len(conn.calls) == 4


def test_a_probe_that_ends_without_an_answer_still_ends():
    """A request that raises something else (a fault of ours) counts as failed: the breaker
    must not wait forever for the outcome of its one probe."""
    clock = FakeClock()
    conn = Scripted("fail", "fail", "fail")
    server = handle(conn, clock=clock, backoff=0.001)
    take_down(server)
    clock.now += COOLDOWN_S

    def broken(connection: Scripted, timeout: float) -> str:
        raise RuntimeError("bug in the request")

    with pytest.raises(RuntimeError):
        server.call(broken)
    assert server.breaker.state == "open"
    clock.now += COOLDOWN_S
    assert server.call(stat) == "answer" and server.up


def test_a_cancelled_probe_on_the_loop_still_ends():
    clock = FakeClock()
    conn = Scripted("fail", "fail", "fail")
    server = handle(conn, clock=clock, backoff=0.001)
    take_down(server)
    clock.now += COOLDOWN_S

    async def cancel_the_probe() -> None:
        with trio.move_on_after(0.05):
            await server.call_on_loop(lambda timeout: trio.sleep_forever())

    trio.run(cancel_the_probe)
    assert server.breaker.state == "open"
    clock.now += COOLDOWN_S

    async def answered(timeout: float) -> str:
        return "answer"

    assert trio.run(server.call_on_loop, answered) == "answer" and server.up
