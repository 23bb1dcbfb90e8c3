"""Block servers as separate processes on 127.0.0.1, started through the `aifs flash serve` command."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0


def child_env() -> dict[str, str]:
    """Children import this checkout of aifs, whatever is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class ServerProcess:
    def __init__(self, root: Path, capacity: str = "256MiB", transport: str = "tcp") -> None:
        self.root = root
        self.capacity = capacity
        self.transport = transport
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log = root.with_suffix(".log")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spawn(self) -> None:
        argv = [sys.executable, "-m", "aifs.cli.flash_cmd", "serve", "--dir", str(self.root),
                "--capacity", self.capacity, "--listen", f"127.0.0.1:{self.port}",
                "--transport", self.transport, "--log-level", "warning"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=log)

    def wait_ready(self) -> None:
        """Read the 'serving HOST:PORT over KIND' line; remember the port for restarts."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise RuntimeError(f"flash server did not start in {START_TIMEOUT}s: {self.log.read_text()}")
            chunk = os.read(self.proc.stdout.fileno(), 1)
            if not chunk:
                raise RuntimeError(f"flash server exited: {self.log.read_text()}")
            line += chunk
        words = line.decode().split()
        assert words[0] == "serving", line
        self.port = int(words[1].rsplit(":", 1)[1])

    def start(self) -> "ServerProcess":
        self.spawn()
        self.wait_ready()
        return self

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crashed node."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, as an operator would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        """The same directory on the same port: clients find it where it was."""
        self.kill()
        self.start()


def start_all(servers: list[ServerProcess]) -> list[ServerProcess]:
    for server in servers:
        server.spawn()
    for server in servers:
        server.wait_ready()
    return servers
