"""Block servers as separate processes on 127.0.0.1, started through the `aifs flash serve` command.

Each server is started with a secret file (one made for it, or one it shares with
others); `secret` is what a client needs to talk to it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from aifs.rdma.auth import Secret, write_secret_file

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0


def child_env() -> dict[str, str]:
    """Children import this checkout of aifs, whatever is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def new_secret_file(path: Path) -> Path:
    write_secret_file(path)
    return path


class ServerProcess:
    def __init__(self, root: Path, capacity: str = "256MiB", transport: str = "tcp", secret_file: Path | None = None,
                 options: tuple[str, ...] = (), limit_files: int | None = None) -> None:
        """`options`: more `aifs flash serve` options; `limit_files`: the process's descriptor limit."""
        self.root = root
        self.capacity = capacity
        self.transport = transport
        self.secret_file = secret_file or new_secret_file(root.with_suffix(".secret"))
        self.options = options
        self.limit_files = limit_files
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log = root.with_suffix(".log")

    @property
    def secret(self) -> Secret:
        return Secret.from_file(self.secret_file)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spawn(self) -> None:
        argv = [sys.executable, "-m", "aifs.cli.flash_cmd", "serve", "--dir", str(self.root),
                "--capacity", self.capacity, "--listen", f"127.0.0.1:{self.port}",
                "--transport", self.transport, "--secret-file", str(self.secret_file), "--log-level", "info",
                *self.options]
        if self.limit_files is not None:
            argv = ["prlimit", f"--nofile={self.limit_files}", *argv]
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

    def rss(self) -> int:
        """Bytes of memory the server process holds (VmRSS)."""
        assert self.proc is not None
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) << 10

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
