"""What an S3 endpoint sends in answer to GETs, counted at the endpoint's door.

A bench row that says how many times a dataset crossed from the object store cannot take
the clients' word for it: their own counters are part of what is measured. So the clients
talk to an HTTP proxy on 127.0.0.1 that relays every request to the endpoint unchanged
(the Host header too, so that signatures still verify) and every answer back, and sums
the body bytes of the answers to GETs, and the requests of each kind. It knows nothing of
S3 but that. It runs in a
process of its own, so that relaying never competes for an interpreter's lock with what
the bench times in its own process.
"""

import http.client
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.sharedctypes import SynchronizedArray
from urllib.parse import urlsplit

from aifs.bench.workload import BenchError

PIECE = 1 << 20
UPSTREAM_TIMEOUT_S = 120.0
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
              "expect", "content-length"}  # the relay sets its own framing, in both directions
RETRIED = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)
START_TIMEOUT_S = 30.0


COUNTED = ("GET", "PUT")  # request methods counted, after the GET bytes in the shared array


@dataclass(frozen=True)
class S3Counter:
    """The proxy's address, as the endpoint for clients, and what it counted so far."""

    endpoint: str
    _counted: SynchronizedArray

    def get_bytes(self) -> int:
        """Body bytes of every answer to a GET since the proxy started."""
        with self._counted.get_lock():
            return self._counted[0]

    def requests(self, method: str) -> int:
        """Requests of `method` (GET or PUT) the endpoint answered since the proxy started."""
        with self._counted.get_lock():
            return self._counted[1 + COUNTED.index(method)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, counted: SynchronizedArray) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream = urlsplit(upstream)
        self.counted = counted

    def add(self, method: str, requests: int, nbytes: int) -> None:
        with self.counted.get_lock():
            if method == "GET":
                self.counted[0] += nbytes
            if method in COUNTED:
                self.counted[1 + COUNTED.index(method)] += requests

    def connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.upstream.scheme == "https" else http.client.HTTPConnection
        return kind(self.upstream.netloc, timeout=UPSTREAM_TIMEOUT_S)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-answer is no error of the endpoint's: nothing to report."""


class _Relay(BaseHTTPRequestHandler):
    """One client connection, relayed over one kept-alive connection to the endpoint."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a request log of every block would drown the bench's own output."""

    def do_GET(self) -> None:
        self._relay()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _relay(self) -> None:
        body = self._request_body()
        headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
        try:
            response = self._ask(body, headers)
        except (OSError, http.client.HTTPException) as error:
            self.send_error(502, f"the S3 endpoint behind the counting proxy failed: {error}")
            return
        self.server.add(self.command, 1, 0)
        self._answer(response)

    def _request_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return b"".join(iter(self._next_chunk, b""))
        length = int(self.headers.get("Content-Length", 0))
        return self.rfile.read(length) if length else None

    def _next_chunk(self) -> bytes:
        size = int(self.rfile.readline().split(b";")[0], 16)
        data = self.rfile.read(size)
        self.rfile.readline()  # the CRLF after the data, or the (empty) trailer after the last chunk
        return data

    def _ask(self, body: bytes | None, headers: dict[str, str]) -> http.client.HTTPResponse:
        """The endpoint's answer; a kept-alive connection it has closed meanwhile is opened anew, once."""
        reused = self._upstream is not None
        if self._upstream is None:
            self._upstream = self.server.connect()
        try:
            self._upstream.request(self.command, self.path, body=body, headers=headers)
            return self._upstream.getresponse()
        except RETRIED:
            self._upstream.close()
            if not reused:
                raise
            self._upstream = None
            return self._ask(body, headers)

    def _answer(self, response: http.client.HTTPResponse) -> None:
        """Relay the answer with a Content-Length of its own. Its request and bytes are counted
        before they are sent: a client that has the whole answer sees them counted."""
        length = response.getheader("Content-Length")
        whole = response.read() if length is None else None  # an answer of unknown length: small, kept whole
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(whole)) if whole is not None else length)
        self.end_headers()
        if whole is not None:
            self._send(whole)
        else:
            self._copy(response)

    def _copy(self, response: http.client.HTTPResponse) -> None:
        buffer = bytearray(PIECE)
        view = memoryview(buffer)
        while n := response.readinto(buffer):
            self._send(view[:n])

    def _send(self, body: bytes | memoryview) -> None:
        self.server.add(self.command, 0, len(body))
        self.wfile.write(body)


def _serve(upstream: str, counted: SynchronizedArray, ready: Connection) -> None:
    """The proxy process: says its port, then relays until terminated."""
    server = _Server(upstream, counted)
    ready.send(server.server_address[1])
    server.serve_forever()


@contextmanager
def counting_proxy(upstream: str) -> Iterator[S3Counter]:
    """A proxy on 127.0.0.1 in front of the S3 endpoint `upstream` until the block ends."""
    context = get_context("spawn")
    counted = context.Array("Q", 1 + len(COUNTED))
    ready, told = context.Pipe(duplex=False)
    process = context.Process(target=_serve, args=(upstream, counted, told), name="s3-counting-proxy", daemon=True)
    process.start()
    try:
        wait([ready, process.sentinel], START_TIMEOUT_S)
        if not ready.poll():
            why = (f"did not start in {START_TIMEOUT_S:.0f} s" if process.exitcode is None
                   else f"exited with code {process.exitcode}")
            raise BenchError(f"the counting proxy in front of {upstream} {why}")
        yield S3Counter(f"http://127.0.0.1:{ready.recv()}", counted)
    finally:
        process.terminate()
        process.join()
