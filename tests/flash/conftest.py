"""Fixtures: block servers as real processes on 127.0.0.1, killed at teardown whatever happened; and the
S3 endpoint and redis-server of tests/s3, on which a mount serves its peers (`peer_mount.PeerMount`)."""

from __future__ import annotations

import pytest
from s3.conftest import moto_server  # noqa: F401 - fixture
from s3.helpers_cluster import redis_server  # noqa: F401 - fixture

from .servers import ServerProcess, new_secret_file, start_all


@pytest.fixture
def flash_servers(tmp_path_factory):
    """start(n, **options) -> n running servers, each with its own directory."""
    started: list[ServerProcess] = []

    def start(n: int, **options) -> list[ServerProcess]:
        """The n servers share one secret, as the servers of one volume do."""
        base = tmp_path_factory.mktemp("flash")
        secret_file = new_secret_file(base / "volume.secret")
        servers = [ServerProcess(base / f"s{i}", secret_file=secret_file, **options) for i in range(n)]
        started.extend(servers)
        return start_all(servers)

    yield start
    for server in started:
        server.kill()
