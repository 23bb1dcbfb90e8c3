"""A redis-server of a bench mode's own: the metadata engine of its shared volumes.

Started as a child on 127.0.0.1 with its data in a scratch folder and the durability aifs
asks of its engine (append-only file, fsynced on every write), so the numbers include what
a production server pays for it. Mounts of several volumes share it, each in a database of
its own (aifs' and JuiceFS' alike).
"""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from aifs.bench.scratch import child, free_port
from aifs.bench.workload import BenchError

REDIS_SERVER = "redis-server"


@dataclass(frozen=True)
class RedisServer:
    """A running server: where it listens, and questions about its memory."""

    port: int

    def url(self, db: int) -> str:
        """The `[meta] url` (and JuiceFS META-URL) of database `db`."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def used_memory(self) -> int:
        """INFO's used_memory: the bytes the server's data takes, without allocator slack."""
        with redis.Redis(port=self.port, socket_timeout=30) as client:
            return int(client.info("memory")["used_memory"])


@contextmanager
def redis_server(root: Path) -> Iterator[RedisServer]:
    """A redis-server with its files in ROOT/redis until the block ends."""
    binary = shutil.which(REDIS_SERVER)
    if binary is None:
        raise BenchError("redis-server is not installed (Debian's package redis-server); "
                         "this mode needs it for the shared metadata engine")
    directory = root / "redis"
    directory.mkdir()
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no",
            "--daemonize", "no"]
    with child("redis-server", argv, port, root / "redis.log"):
        yield RedisServer(port)
