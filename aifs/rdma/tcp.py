"""TCP transport: requests pipeline on a few sockets per server; payloads land in place.

Each socket has one reader thread that matches answers to waiting callers by
request id and receives a payload straight into the buffer its caller gave
(`recv_into`), and callers send header and payload as two buffers of one
`sendmsg`. Each socket authenticates when it connects and signs every request
(`auth`); a server that refuses our secret breaks the stream like any other
failure, with an error that says so. A request that times out breaks its
socket: a server that stopped answering one request is not trusted with the
others, and they fail at once instead of each waiting out its own timeout. The
next request reconnects.
The sockets block: an idle reader sleeps in recv() without a timeout (ten
wake-ups a second per socket would take the GIL from the mount's event loop at
random moments, its reads' worst latencies), and a payload arrives in one
recv(MSG_WAITALL), since each return from a system call must win the GIL back
from the busy event loop; breaking or closing a stream shuts its socket down,
which wakes the reader. A blocked send wakes every POLL seconds (SO_SNDTIMEO)
to check its deadline.
"""

import itertools
import socket
import struct
import threading
import time
from typing import Any

from aifs.rdma.auth import AuthError, ClientHandshake, RequestMacs, Secret
from aifs.rdma.transport import Address, BlockMissing, RemoteError, ServerStat, TransportError, verify
from aifs.rdma.wire import (
    AUTH, DELETE, GET, HAS, MISSING, PUT, STAT, UNPIN, FrameReader, ProtocolError, frame, remaining,
)
from aifs.tiers.checksum import checksum as block_checksum

DEFAULT_TIMEOUT = 5.0
POLL = 0.1          # a blocked send re-checks its deadline this often (SO_SNDTIMEO)
CLOSE_GRACE = 5.0   # how long a timed-out caller waits for the reader to let go of its buffer
_SCRATCH = 64 << 10

Buffer = bytes | bytearray | memoryview


class _Pending:
    __slots__ = ("dest", "done", "header", "nbytes", "error")

    def __init__(self, dest: memoryview | None) -> None:
        self.dest: memoryview | bytearray | None = dest
        self.done = threading.Event()
        self.header: dict[str, Any] = {}
        self.nbytes = 0
        self.error: Exception | None = None


class _Stream:
    """One socket: callers send under a lock, one reader thread hands answers back by request id."""

    def __init__(self, address: Address, timeout: float, secret: Secret) -> None:
        deadline = time.monotonic() + timeout
        try:
            self._sock = socket.create_connection((address.host, address.port), timeout=max(timeout, 0.001))
        except OSError as e:
            raise TransportError(f"cannot connect to {address}: {e}") from None
        self._address = address
        self._frames = FrameReader()
        try:
            self._macs = self._authenticate(secret, deadline)
        except BaseException:
            self._sock.close()
            raise
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(POLL))
        self._rids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._error: TransportError | None = None
        self._scratch = memoryview(bytearray(_SCRATCH))
        threading.Thread(target=self._read_loop, name=f"aifs-tcp-{address}", daemon=True).start()

    def _authenticate(self, secret: Secret, deadline: float) -> RequestMacs:
        """The handshake (see `auth`), within the connect timeout; the signer of our requests."""
        handshake = ClientHandshake(secret, self._address)
        try:
            self._sock.sendall(frame(handshake.answer(self._handshake_message(deadline))))
            return handshake.finish(self._handshake_message(deadline))
        except (OSError, ProtocolError) as e:
            raise TransportError(f"authenticating with {self._address} failed: {e}") from None

    def _handshake_message(self, deadline: float) -> dict[str, Any]:
        while (got := self._frames.header()) is None:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            n = self._sock.recv_into(self._frames.space())
            if n == 0:
                raise TransportError(f"{self._address} closed the connection while authenticating")
            self._frames.filled(n)
        header, n = got
        if n:
            raise ProtocolError("a handshake frame carries no payload")
        return header

    @property
    def broken(self) -> bool:
        return self._error is not None

    def call(self, header: dict[str, Any], payload: memoryview | None, dest: memoryview | None,
             timeout: float) -> _Pending:
        deadline = time.monotonic() + timeout
        pending = _Pending(dest)
        with self._lock:
            if self._error is not None:
                raise self._error
            header["rid"] = rid = next(self._rids)
            self._pending[rid] = pending
        self._send(frame(header, len(payload) if payload is not None else 0), payload, deadline)
        if not pending.done.wait(max(0.0, deadline - time.monotonic())):
            self.fail(TransportError(f"{self._address} did not answer within {timeout:.3g}s"))
            pending.done.wait(CLOSE_GRACE)
        if pending.error is not None:
            raise pending.error
        return pending

    def _send(self, head: bytes, payload: memoryview | None, deadline: float) -> None:
        """One request; signed under the send lock, as the server counts requests in the order they arrive."""
        if not self._send_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self.fail(TransportError(f"sending to {self._address} is stuck"))
            return
        try:
            buffers = [memoryview(self._macs.seal(head))]
            if payload is not None and len(payload):
                buffers.append(payload)
            while buffers and self._error is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("send timed out")
                try:
                    buffers = remaining(buffers, self._sock.sendmsg(buffers))
                except BlockingIOError:  # SO_SNDTIMEO passed with nothing sent
                    continue
        except OSError as e:
            self.fail(TransportError(f"sending to {self._address} failed: {e}"))
        finally:
            self._send_lock.release()

    def fail(self, error: TransportError) -> None:
        """Break the stream: every caller still waiting gets `error`; the socket is shut down."""
        with self._lock:
            first = self._error is None
            if first:
                self._error = error
            waiting = list(self._pending.values())
            self._pending.clear()
        if first:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for pending in waiting:
            pending.error = self._error
            pending.done.set()

    def close(self) -> None:
        self.fail(TransportError(f"connection to {self._address} closed"))

    # -- the reader thread ---------------------------------------------------------

    def _read_loop(self) -> None:
        claimed: _Pending | None = None
        try:
            while True:
                header, n = self._next_header()
                if header.get("err") == AUTH:
                    raise AuthError(f"{self._address} refused a request: {header.get('msg', '')}")
                with self._lock:
                    claimed = self._pending.pop(header.get("rid"), None)
                self._receive_payload(claimed, n)
                if claimed is not None:
                    claimed.header, claimed.nbytes = header, n
                    claimed.done.set()
                    claimed = None
        except (OSError, ProtocolError, TransportError) as e:
            self.fail(e if isinstance(e, TransportError) else TransportError(f"{self._address}: {e}"))
            if claimed is not None:
                claimed.error = self._error
                claimed.done.set()
        finally:
            with self._send_lock:  # no sender is inside sendmsg when the descriptor goes away
                self._sock.close()

    def _next_header(self) -> tuple[dict[str, Any], int]:
        while True:
            got = self._frames.header()
            if got is not None:
                return got
            self._frames.filled(self._recv_into(self._frames.space()))

    def _recv_into(self, view: memoryview, flags: int = 0) -> int:
        """Blocks without a timeout: `fail` shuts the socket down, which wakes it."""
        try:
            n = self._sock.recv_into(view, 0, flags)
        except OSError:
            if self._error is not None:
                raise self._error from None
            raise
        if self._error is not None:
            raise self._error
        if n == 0:
            raise TransportError(f"{self._address} closed the connection")
        return n

    def _receive_payload(self, pending: _Pending | None, n: int) -> None:
        if pending is None:  # an answer nobody waits for any more
            dest = None
        elif pending.dest is None:
            pending.dest = bytearray(n)
            dest = memoryview(pending.dest)
        elif n > len(pending.dest):
            raise ProtocolError(f"answer of {n} bytes for a buffer of {len(pending.dest)}")
        else:
            dest = pending.dest[:n]
        got = 0
        while got < n:
            target = dest[got:] if dest is not None else self._scratch[:n - got]
            step = self._frames.take(target)
            got += step if step else self._recv_into(target, socket.MSG_WAITALL)


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), round(seconds % 1 * 1e6))


def range_request(block_id: int, offset: int, length: int) -> dict[str, Any]:
    """The request for `length` bytes of a block from `offset` (all of them: offset 0, length -1)."""
    return {"op": GET, "id": block_id, "off": offset, "len": length}


def answer_error(request: dict[str, Any], answer: dict[str, Any]) -> RemoteError | None:
    """What an error answer to `request` raises (BlockMissing for a plain miss); None for success."""
    err = answer.get("err")
    if err == MISSING:
        return BlockMissing(request.get("id", 0))
    return RemoteError(err, answer.get("msg", "")) if err else None


class TcpConnection:
    """Requests to one server, spread round-robin over `streams` sockets that reconnect when broken."""

    def __init__(self, address: Address, streams: int = 2, timeout: float = DEFAULT_TIMEOUT, *,
                 secret: Secret) -> None:
        self.address = address
        self._timeout = timeout
        self._secret = secret
        self._streams: list[_Stream | None] = [None] * streams
        self._locks = [threading.Lock() for _ in range(streams)]
        self._turn = itertools.count()

    def _stream(self, timeout: float) -> _Stream:
        return self._open(next(self._turn) % len(self._streams), timeout)

    def open(self, timeout: float | None = None) -> None:
        for i in range(len(self._streams)):
            self._open(i, self._timeout if timeout is None else timeout)

    def _open(self, i: int, timeout: float) -> _Stream:
        """Stream `i`, connected afresh if it never was or broke."""
        if not self._locks[i].acquire(timeout=timeout):
            raise TransportError(f"connecting to {self.address} is stuck")
        try:
            stream = self._streams[i]
            if stream is None or stream.broken:
                stream = self._streams[i] = _Stream(self.address, timeout, self._secret)
            return stream
        finally:
            self._locks[i].release()

    def call(self, header: dict[str, Any], payload: memoryview | None = None, dest: memoryview | None = None,
             timeout: float | None = None) -> tuple[dict[str, Any], memoryview | bytearray | None, int]:
        """One request; returns (answer header, payload buffer, payload length)."""
        budget = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        stream = self._stream(budget)
        answer = stream.call(header, payload, dest, max(0.0, deadline - time.monotonic()))
        error = answer_error(header, answer.header)
        if error is not None:
            raise error
        return answer.header, answer.dest, answer.nbytes

    def read_into(self, block_id: int, buf: memoryview | bytearray, offset: int = 0,
                  timeout: float | None = None) -> int:
        view = memoryview(buf).cast("B")
        answer, _, n = self.call(range_request(block_id, offset, len(view)), dest=view, timeout=timeout)
        if offset == 0 and n == answer["size"]:
            verify(block_id, view[:n], answer["sum"], self.address)
        return n

    def read(self, block_id: int, timeout: float | None = None) -> bytes | bytearray:
        answer, data, n = self.call(range_request(block_id, 0, -1), timeout=timeout)
        data = data if data is not None else bytearray()  # the buffer received into: no copy
        verify(block_id, data, answer["sum"], self.address)
        return data

    def write(self, block_id: int, data: Buffer, timeout: float | None = None, pin: bool = False,
              checksum: int | None = None) -> None:
        view = memoryview(data).cast("B")
        expected = block_checksum(view) if checksum is None else checksum
        self.call({"op": PUT, "id": block_id, "sum": expected, "pin": pin}, payload=view, timeout=timeout)

    def delete(self, block_id: int, timeout: float | None = None) -> None:
        self.call({"op": DELETE, "id": block_id}, timeout=timeout)

    def unpin(self, block_id: int, timeout: float | None = None) -> None:
        self.call({"op": UNPIN, "id": block_id}, timeout=timeout)

    def contains(self, block_id: int, timeout: float | None = None) -> bool:
        return bool(self.call({"op": HAS, "id": block_id}, timeout=timeout)[0]["has"])

    def stat(self, timeout: float | None = None) -> ServerStat:
        s = self.call({"op": STAT}, timeout=timeout)[0]["stat"]
        return ServerStat(s["capacity"], s["used"], s["blocks"], s["pinned"], s["verbs"])

    def close(self) -> None:
        for stream in self._streams:
            if stream is not None:
                stream.close()


class TcpTransport:
    name = "tcp"

    def __init__(self, streams: int = 2, timeout: float = DEFAULT_TIMEOUT, *, secret: Secret) -> None:
        self.streams = streams
        self.timeout = timeout
        self.secret = secret

    def connect(self, address: Address) -> TcpConnection:
        return TcpConnection(address, self.streams, self.timeout, secret=self.secret)

    def close(self) -> None:
        """Connections own their sockets; the transport holds nothing."""
