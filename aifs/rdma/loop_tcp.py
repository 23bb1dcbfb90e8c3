"""Ranged reads over TCP on the caller's trio loop: a small random read pays no thread hop.

The threaded TcpConnection serves whole blocks, writes and whatever the tier
does in the background. A ranged read is bound by latency instead, and each
hand-off between the event loop, a worker thread and a socket's reader thread
costs about as much as loopback itself. Here a read takes an idle socket of
its server (or opens one), sends its frame, receives the answer in place and
gives the socket back: one request per socket at a time, so no request ids are
matched and no reader task runs. A socket whose request failed, timed out or
was cancelled is closed, never reused, since its answer could still arrive;
the idle ones are dropped with it, as a server that broke one (a restart) broke
them all.

Every socket authenticates when it connects and signs each request (`auth`). An
idle socket the server has closed meanwhile (its idle timeout) is noticed and
dropped before it is used.

Use it from one trio run only: trio sockets belong to the run that made them.
"""

import os
import socket
from typing import Any

import trio

from aifs.rdma.auth import ClientHandshake, RequestMacs, Secret
from aifs.rdma.loopsock import LoopSocket
from aifs.rdma.tcp import answer_error, range_request
from aifs.rdma.transport import Address, TransportError
from aifs.rdma.wire import FrameReader, ProtocolError, frame

MAX_IDLE = 8


class _Connection(LoopSocket):
    macs: RequestMacs  # set once the handshake is done

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.frames = FrameReader()


class LoopTcpReader:
    """Ranged reads from one server; raises BlockMissing, RemoteError or TransportError."""

    def __init__(self, address: Address, secret: Secret) -> None:
        self.address = address
        self._secret = secret
        self._idle: list[_Connection] = []

    async def read_into(self, block_id: int, buf: memoryview | bytearray, offset: int, timeout: float) -> int:
        """Bytes of the block from `offset` into `buf` (up to its length); returns the count.
        Unverified, like every ranged read: the caller checks the chunk checksums."""
        view = memoryview(buf).cast("B")
        request = range_request(block_id, offset, len(view))
        with trio.move_on_after(timeout):
            conn = self._take_idle() or await self._connect()
            try:
                answer, n = await self._exchange(conn, request, view)
            except BaseException:
                conn.close()
                self._drop_idle()
                raise
            self._give_back(conn)
            error = answer_error(request, answer)
            if error is not None:
                raise error
            return n
        self._drop_idle()
        raise TransportError(f"{self.address} did not answer within {timeout:.3g}s")

    async def open(self, sockets: int, timeout: float) -> None:
        """Connect up to `sockets` idle sockets now, so the first reads do not pay for it;
        a server that does not answer is left to the first read to find out."""
        with trio.move_on_after(timeout):
            while len(self._idle) < min(sockets, MAX_IDLE):
                try:
                    self._idle.append(await self._connect())
                except TransportError:
                    return

    async def _connect(self) -> _Connection:
        sock = socket.socket(socket.AF_INET6 if ":" in self.address.host else socket.AF_INET)
        conn = _Connection(sock)
        try:
            try:
                sock.connect((self.address.host, self.address.port))
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
            if error := sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                raise OSError(error, os.strerror(error))
            conn.macs = await self._authenticate(conn)
        except BaseException as e:
            conn.close()
            if isinstance(e, (OSError, ProtocolError)):
                raise TransportError(f"cannot connect to {self.address}: {e}") from None
            raise
        return conn

    async def _authenticate(self, conn: _Connection) -> RequestMacs:
        handshake = ClientHandshake(self._secret, self.address)
        hello = await conn.next_message(conn.frames)
        await conn.sendmsg([memoryview(frame(handshake.answer(hello)))])
        return handshake.finish(await conn.next_message(conn.frames))

    async def _exchange(self, conn: _Connection, request: dict[str, Any],
                        view: memoryview) -> tuple[dict[str, Any], int]:
        try:
            await conn.sendmsg([memoryview(conn.macs.seal(frame(request, 0)))])
            answer, n = await conn.next_header(conn.frames)
            if n > len(view):
                raise ProtocolError(f"answer of {n} bytes for a buffer of {len(view)}")
            await conn.recv_payload(conn.frames, view[:n])
            return answer, n
        except (OSError, ProtocolError) as e:
            raise TransportError(f"{self.address}: {e}") from None

    def _take_idle(self) -> _Connection | None:
        """An idle socket that can still be used, if there is one."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.stale():
                return conn
            conn.close()
        return None

    def _give_back(self, conn: _Connection) -> None:
        if len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()

    def _drop_idle(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def close(self) -> None:
        self._drop_idle()
