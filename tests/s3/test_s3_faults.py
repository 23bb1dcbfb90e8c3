"""S3 going away under the tier: every call fails with EIO within a bounded time, the
circuit breaker opens and fails calls fast, and the tier recovers once S3 is back."""

import errno
import logging
import time
from collections.abc import Callable, Iterator

import pytest

from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_retry import S3Error, S3Unavailable

from .conftest import opening_tiers, s3_settings

COOLDOWN_S = 3.0


def timed(fn, *args):
    """(exception raised, seconds taken); the call must fail."""
    start = time.monotonic()
    with pytest.raises(OSError) as info:
        fn(*args)
    return info.value, time.monotonic() - start


@pytest.fixture
def open_tier(private_moto) -> Iterator[Callable[..., S3Tier]]:
    """Tiers on the test's own server, each on a bucket of its own."""
    yield from opening_tiers(lambda **keys: s3_settings(
        private_moto, private_moto.create_bucket(), breaker_cooldown=COOLDOWN_S, **keys))


def wait_for_probe() -> None:
    time.sleep(COOLDOWN_S + 0.05)


@pytest.mark.parametrize("upload_process", [False, True])  # PUTs from the mount, or from its child
def test_killed_server_fails_in_bounded_time_then_recovers(open_tier, private_moto, upload_process, caplog):
    caplog.set_level(logging.WARNING, logger="aifs.tiers.breaker")
    tier = open_tier(retries=3, breaker_failures=3, upload_process=upload_process)
    tier.put(1, b"before")
    private_moto.stop()

    error, took = timed(tier.put, 2, b"during")
    assert error.errno == errno.EIO and took < 10  # 3 refused attempts, backoff under 0.7 s
    assert f"PUT s3://{tier.bucket}/02/0000000000000002" in str(error)
    assert "Could not connect" in str(error)
    assert tier.breaker.state == "open"

    error, took = timed(tier.get, 1)  # fails fast: nothing is sent while the breaker is open
    assert isinstance(error, S3Unavailable) and error.errno == errno.EIO and took < 1.0
    assert "next probe in" in str(error) and "Could not connect" in str(error)
    error, _ = timed(tier.contains, 1)
    assert isinstance(error, S3Unavailable)

    private_moto.start()  # same port; moto starts empty, so bring the bucket back
    private_moto.client().create_bucket(Bucket=tier.bucket)
    assert isinstance(timed(tier.put, 2, b"during")[0], S3Unavailable)  # still cooling down
    wait_for_probe()
    tier.put(2, b"after")  # the probe succeeds and closes the breaker
    assert tier.breaker.state == "closed"
    assert tier.get(2) == b"after"
    assert tier.get(1) is None  # moto lost it with the process; S3 itself would not
    said = [r.getMessage() for r in caplog.records if r.name == "aifs.tiers.breaker"]
    endpoint = f"S3 endpoint {private_moto.endpoint} (bucket {tier.bucket})"
    assert len(said) == 2 and said[0].startswith(f"{endpoint} marked down after 3 consecutive failures (last: "), said
    assert said[1].startswith(f"{endpoint} is back after "), said


def test_failed_probe_keeps_the_breaker_open(open_tier, private_moto):
    tier = open_tier(retries=0, breaker_failures=1)
    private_moto.stop()
    timed(tier.get, 1)
    assert tier.breaker.state == "open"
    wait_for_probe()
    error, _ = timed(tier.get, 1)  # the probe: one real attempt, refused
    assert isinstance(error, S3Error) and not isinstance(error, S3Unavailable)
    assert tier.breaker.state == "open"
    assert isinstance(timed(tier.get, 1)[0], S3Unavailable)


@pytest.mark.parametrize("upload_process", [False, True])
def test_frozen_server_times_out_instead_of_hanging(open_tier, private_moto, upload_process):
    tier = open_tier(retries=1, breaker_failures=2, read_timeout=1.0, upload_process=upload_process)
    tier.put(1, b"x" * 1000)
    private_moto.freeze()  # accepts connections, never answers
    try:
        error, took = timed(tier.get, 1)
        assert error.errno == errno.EIO and took < 4  # two 1 s timeouts and one short backoff
        assert "timeout" in str(error).lower()
        assert tier.breaker.state == "open"
        assert timed(tier.put, 2, b"y")[1] < 0.1
    finally:
        private_moto.thaw()
    wait_for_probe()
    assert tier.get(1) == b"x" * 1000
    assert tier.breaker.state == "closed"
