"""A real redis-server (Debian's package) for the shared metadata engine's tests: its own
process on a free loopback port, its data and append-only file in a directory of its own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

START_TIMEOUT_S = 20.0
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_redis() -> None:
    if not os.path.exists(REDIS_SERVER):
        pytest.fail("redis-server is not installed; `deploy/install.sh --test` installs it")


class RedisServer:
    """One redis-server with AOF fsynced on every write (what aifs asks of its engine).
    Stopping keeps the directory, so a restart replays the AOF."""

    def __init__(self, directory: Path, port: int | None = None, *extra: str) -> None:
        require_redis()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
                "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--protected-mode", "no", "--daemonize", "no", *self.extra]

    def start(self) -> None:
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n"
                                   + (self.dir / "redis.log").read_text()[-3000:])
            time.sleep(0.05)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server vanishes as a crashed one would; its AOF stays."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def flush(self) -> None:
        """Empty every database, so the next test formats a new volume."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)
