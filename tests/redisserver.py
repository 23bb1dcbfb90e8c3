"""A real redis-server (Debian's package) for the shared metadata engine's tests: its own
process on a free loopback port, its data and append-only file in a directory of its own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

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
        """Whether it serves requests (one that wants a password answers PING with NOAUTH)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server vanishes as a crashed one would; its AOF stays."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connected but silent, as a hung server or a partitioned network is."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()

    def flush(self, db: int | None = None) -> None:
        """Empty every database (or database `db`), so the next test formats a new volume."""
        command = b"FLUSHALL\r\n" if db is None else b"SELECT %d\r\nFLUSHDB\r\n" % db
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(command)
            s.recv(64)

    def url_of(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


def wait_until(predicate, what: str, timeout: float = START_TIMEOUT_S) -> None:
    """Poll `predicate` until it holds; RuntimeError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def replication(server: RedisServer) -> dict:
    """The server's INFO replication section."""
    with redis.Redis(port=server.port, socket_timeout=5) as client:
        return client.info("replication")


def start_replica(directory: Path, primary: RedisServer) -> RedisServer:
    """A replica of `primary` (AOF fsynced on every write, as the primary), returned once it
    holds the primary's data and follows its changes."""
    with redis.Redis(port=primary.port, socket_timeout=5) as client:
        client.config_set("repl-diskless-sync-delay", 0)  # no waiting for more replicas to join
    replica = RedisServer(directory, None, "--replicaof", "127.0.0.1", str(primary.port))
    replica.start()
    wait_until(lambda: replication(replica).get("master_link_status") == "up" and _streams_to(primary, replica),
               f"the replica on port {replica.port} to sync with port {primary.port}")
    return replica


def _streams_to(primary: RedisServer, replica: RedisServer) -> bool:
    """Whether the primary counts the replica as online, as its ROLE and WAIT do: the
    replica's own link is up a moment before, while the primary awaits its first ack."""
    return any(isinstance(entry, dict) and str(entry.get("port")) == str(replica.port) and entry.get("state") == "online"
               for entry in replication(primary).values())


class SentinelServer(RedisServer):
    """One Sentinel (quorum 1) watching `primary` as `master`, declaring it down after
    DOWN_AFTER_MS without an answer."""

    DOWN_AFTER_MS = 1000
    FAILOVER_TIMEOUT_MS = 10000

    def __init__(self, directory: Path, primary: RedisServer, master: str = "aifs") -> None:
        super().__init__(directory)
        self.primary = primary
        self.master = master

    def url(self, db: int = 0) -> str:
        return f"redis+sentinel://127.0.0.1:{self.port}/{self.master}/{db}"

    def command(self) -> list[str]:
        config = self.dir / "sentinel.conf"  # Sentinel rewrites it with what it learns
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {self.master} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.master} {self.DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {self.master} {self.FAILOVER_TIMEOUT_MS}\n")
        return [REDIS_SERVER, str(config), "--sentinel"]

    def _client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, protocol=2)

    def replicas_known(self) -> int:
        """Replicas of the master that this Sentinel knows and considers up."""
        with self._client() as client:
            return sum(1 for replica in client.sentinel_slaves(self.master) if not replica["is_sdown"])

    def primary_port(self) -> int:
        with self._client() as client:
            return client.sentinel_get_master_addr_by_name(self.master)[1]


def make_certificates(directory: Path) -> dict[str, Path]:
    """A throwaway CA, and a certificate for 127.0.0.1 and one for a client, both signed by it
    (openssl). Keys: ca, server_cert, server_key, client_cert, client_key."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {name: directory / f"{name.replace('_', '.')}.pem" for name in
             ("ca", "ca_key", "server_cert", "server_key", "client_cert", "client_key")}

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=aifs test CA",
            "-keyout", str(files["ca_key"]), "-out", str(files["ca"]))
    for who, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=aifs client")):
        request = directory / f"{who}.csr"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                "-keyout", str(files[f"{who}_key"]), "-out", str(request))
        extensions = directory / f"{who}.ext"
        extensions.write_text("subjectAltName=IP:127.0.0.1\n" if who == "server" else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", str(request), "-CA", str(files["ca"]), "-CAkey", str(files["ca_key"]),
                "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(files[f"{who}_cert"]))
    return files


def start_tls_server(directory: Path, certificates: dict[str, Path]) -> tuple[RedisServer, int]:
    """A server that also takes TLS connections (clients must show a certificate signed by the
    CA); returns it and its TLS port. Its plain port stays for the helpers here."""
    tls_port = free_port()
    server = RedisServer(directory, None, "--tls-port", str(tls_port),
                         "--tls-cert-file", str(certificates["server_cert"]),
                         "--tls-key-file", str(certificates["server_key"]),
                         "--tls-ca-cert-file", str(certificates["ca"]), "--tls-auth-clients", "yes")
    server.start()
    return server, tls_port


@contextmanager
def running(directory: Path) -> Iterator[RedisServer]:
    """A started RedisServer, killed when the block ends."""
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.kill()
