"""A real S3 endpoint for the S3 tier's tests: moto's standalone server, started as its own
process on a free loopback port and talked to by boto3 over HTTP."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config as BotoConfig

from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.s3 import S3Tier
from aifs.tiers.s3_marker import VolumeMarker

START_TIMEOUT_S = 30.0
ACCESS_KEY, SECRET_KEY = "aifs-test", "aifs-test-secret"
_buckets = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """One moto server process; it keeps everything in memory, so a restart starts empty."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"moto-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto server on port {self.port} did not start:\n"
                                   + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def _answers(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            opener.open(self.endpoint + "/", timeout=1).close()
        except urllib.error.HTTPError:
            return True  # any HTTP answer means it is serving
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """SIGKILL: the S3 endpoint vanishes at once, as a crashed server would."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a frozen process must die too
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def freeze(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel, but nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def client(self) -> Any:
        """A plain boto3 client, to look at the bucket independently of the tier."""
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            config=BotoConfig(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1},
                              request_checksum_calculation="when_required",
                              response_checksum_validation="when_required"),
        )

    def create_bucket(self) -> str:
        name = f"aifs-test-{next(_buckets)}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory) -> Iterator[MotoServer]:
    """One server for the tests that do not break it; each test uses its own bucket."""
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_moto(tmp_path) -> Iterator[MotoServer]:
    """A server of this test's own, free to be killed, frozen and restarted."""
    server = MotoServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def bucket(moto_server) -> str:
    return moto_server.create_bucket()


def s3_settings(server: MotoServer, bucket: str, **keys: Any) -> S3Settings:
    """The s3 tier table of a config, pointing at `server`."""
    return S3Settings.model_validate({
        "kind": "s3", "endpoint": server.endpoint, "bucket": bucket,
        "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, **keys,
    })


def new_volume(block_size: int = 4 << 20) -> VolumeMarker:
    return VolumeMarker(str(uuid.uuid4()), block_size, 1)


def opening_tiers(settings_of: Callable[..., S3Settings]) -> Iterator[Callable[..., S3Tier]]:
    """A fixture's body: it yields an opener of S3Tiers on `settings_of(**keys)`, and closes
    them after the test (their upload processes stopped)."""
    opened: list[S3Tier] = []

    def open_(volume: VolumeMarker | None = None, **keys: Any) -> S3Tier:
        opened.append(S3Tier(settings_of(**keys), 1 << 50, volume or new_volume()))
        return opened[-1]

    yield open_
    for tier in opened:
        tier.close()


@pytest.fixture
def open_tier(moto_server, bucket) -> Iterator[Callable[..., S3Tier]]:
    """Open an S3Tier on this test's bucket; keys override the tier's settings."""
    yield from opening_tiers(lambda **keys: s3_settings(moto_server, bucket, **keys))
