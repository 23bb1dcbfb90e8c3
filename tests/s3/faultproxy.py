"""A fault-injecting TCP proxy on loopback, to put between aifs and an S3 server.

It relays bytes both ways and, at random but reproducibly (one RNG per connection, seeded
from the proxy's seed and the connection's number), breaks things the way a bad network
does:

* reset        the connection is reset (RST) as soon as it is accepted;
* cut-request  a request is cut off after a random number of its bytes, then reset;
* cut-response a response is cut off after a random number of its bytes, then reset;
* delay        a response is held back up to `max_delay` seconds before its first byte;
* stall        a response is held back `stall_s` seconds (longer than the client's read
               timeout, so the client gives up on it).

Faults are bounded: after `max_faults` of them the proxy only relays, so a client that
retries is certain to get through. HTTP/1.1 keeps connections alive, so "a request" is
what the client sends after the previous response began, and "a response" is what the
server sends after the request began; that is all the proxy knows of HTTP.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass

RECV = 64 << 10


@dataclass(frozen=True)
class Faults:
    """Chances per connection (reset) or per request / response (the others), and bounds."""

    seed: int = 0
    reset: float = 0.0
    cut_request: float = 0.0
    cut_response: float = 0.0
    delay: float = 0.0
    max_delay: float = 0.2
    stall: float = 0.0
    stall_s: float = 3.0
    cut_within: int = 256 << 10  # a cut happens after 0 .. cut_within bytes of the message
    max_faults: int = 1000


class _Budget:
    """Counts faults by kind and refuses new ones past the bound (shared by all connections)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, kind: str) -> bool:
        with self._lock:
            if self.counts.total() >= self.limit:
                return False
            self.counts[kind] += 1
            return True


class _Connection:
    """One client connection and its upstream connection, relayed by two threads."""

    def __init__(self, client: socket.socket, upstream: socket.socket, faults: Faults,
                 rng: random.Random, budget: _Budget) -> None:
        self.client, self.upstream = client, upstream
        self.faults, self.rng, self.budget = faults, rng, budget
        self._lock = threading.Lock()  # the RNG and the turn-taking flags
        self._request_turn = True  # the next client bytes start a request
        self._response_turn = False  # the next server bytes start a response
        self._closed = threading.Event()

    def _chance(self, p: float, kind: str) -> bool:
        return p > 0 and self.rng.random() < p and self.budget.take(kind)

    def _start_request(self) -> int | None:
        """Called on the first bytes of a request: where to cut it off, if at all."""
        with self._lock:
            self._request_turn, self._response_turn = False, True
            if self._chance(self.faults.cut_request, "cut-request"):
                return self.rng.randrange(self.faults.cut_within)
            return None

    def _start_response(self) -> tuple[float, int | None]:
        """Called on the first bytes of a response: (seconds to hold it back, where to cut it)."""
        with self._lock:
            self._response_turn, self._request_turn = False, True
            hold = 0.0
            if self._chance(self.faults.stall, "stall"):
                hold = self.faults.stall_s
            elif self._chance(self.faults.delay, "delay"):
                hold = self.rng.uniform(0, self.faults.max_delay)
            cut = None
            if self._chance(self.faults.cut_response, "cut-response"):
                cut = self.rng.randrange(self.faults.cut_within)
            return hold, cut

    def run(self) -> None:
        with self._lock:
            reset = self._chance(self.faults.reset, "reset")
        if reset:
            self.abort()
            return
        requests = threading.Thread(target=self._pump, args=(self.client, self.upstream, True),
                                    daemon=True)
        requests.start()
        self._pump(self.upstream, self.client, False)
        requests.join()
        self.close()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        cut: int | None = None
        try:
            while not self._closed.is_set():
                data = src.recv(RECV)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                if requests and self._request_turn:
                    cut = self._start_request()
                elif not requests and self._response_turn:
                    hold, cut = self._start_response()
                    if hold and self._closed.wait(hold):
                        return
                if cut is not None and cut < len(data):
                    dst.sendall(data[:cut])
                    self.abort()
                    return
                if cut is not None:
                    cut -= len(data)
                dst.sendall(data)
        except OSError:
            self.abort()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def abort(self) -> None:
        """Reset both sides: SO_LINGER 0 makes close send RST instead of FIN, and shutting
        the read side first wakes the other pump's blocked recv."""
        for sock in (self.client, self.upstream):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        self._closed.set()
        self.client.close()
        self.upstream.close()


class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and relays every connection to `upstream`."""

    def __init__(self, upstream_port: int, faults: Faults) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.faults = faults
        self.budget = _Budget(faults.max_faults)
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._open: list[_Connection] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def counts(self) -> Counter[str]:
        """Faults injected so far, by kind."""
        return self.budget.counts

    def start(self) -> "FaultProxy":
        self._thread.start()
        return self

    def change(self, faults: Faults) -> None:
        """Inject these faults from now on, on the connections open already too."""
        self.faults = faults
        for connection in self._open:
            connection.faults = faults

    def stop(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)
        for connection in self._open:
            connection.abort()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            rng = random.Random(f"{self.faults.seed}:{self.connections}")
            self.connections += 1
            connection = _Connection(client, upstream, self.faults, rng, self.budget)
            self._open = [c for c in self._open if not c.closed] + [connection]
            threading.Thread(target=connection.run, daemon=True).start()
