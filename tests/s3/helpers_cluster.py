"""Several nodes of one shared volume on this machine: each node is a mount with its own
state directory and mountpoint, all of them on one redis-server (the metadata engine) and
one S3 bucket, everything on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redisserver import RedisServer, running

from .conftest import MotoServer
from .helpers_mount import S3Volume

HEARTBEAT_S = 0.3
SESSION_TIMEOUT_S = 2.0


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def make_cluster(moto_server: MotoServer, redis_server: RedisServer,
                 make_s3_volume: Callable[..., S3Volume]) -> Callable[..., list[S3Volume]]:
    """`make_cluster(n, **setup)`: n unmounted nodes of one new volume (an empty Redis, a new
    bucket); heartbeats are short so that a dead node is noticed within seconds."""

    def make(count: int, **setup: Any) -> list[S3Volume]:
        redis_server.flush()
        bucket = moto_server.create_bucket()
        meta = {"url": redis_server.url, "heartbeat": HEARTBEAT_S, "session_timeout": SESSION_TIMEOUT_S,
                **setup.pop("meta", {})}
        return [make_s3_volume(moto_server.endpoint, bucket, meta=meta, **setup) for _ in range(count)]

    return make


def mount_all(nodes: list[S3Volume]) -> list[Path]:
    for node in nodes:
        node.mount()
    return [node.path for node in nodes]
