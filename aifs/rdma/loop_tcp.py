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

Use it from one trio run only: trio sockets belong to the run that made them.
"""

import os
import socket
from typing import Any

import trio

from aifs.rdma.loopsock import LoopSocket
from aifs.rdma.tcp import answer_error, range_request
from aifs.rdma.transport import Address, TransportError
from aifs.rdma.wire import FrameReader, ProtocolError, frame

MAX_IDLE = 8


class _Connection(LoopSocket):
    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.frames = FrameReader(64 << 10)


class LoopTcpReader:
    """Ranged reads from one server; raises BlockMissing, RemoteError or TransportError."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self._idle: list[_Connection] = []

    async def read_into(self, block_id: int, buf: memoryview | bytearray, offset: int, timeout: float) -> int:
        """Bytes of the block from `offset` into `buf` (up to its length); returns the count.
        Unverified, like every ranged read: the caller checks the chunk checksums."""
        view = memoryview(buf).cast("B")
        request = range_request(block_id, offset, len(view))
        with trio.move_on_after(timeout):
            conn = self._idle.pop() if self._idle else await self._connect()
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
        except BaseException as e:
            conn.close()
            if isinstance(e, OSError):
                raise TransportError(f"cannot connect to {self.address}: {e}") from None
            raise
        return conn

    async def _exchange(self, conn: _Connection, request: dict[str, Any],
                        view: memoryview) -> tuple[dict[str, Any], int]:
        try:
            await conn.sendmsg([memoryview(frame(request, 0))])
            while (got := conn.frames.header()) is None:
                conn.frames.filled(await self._recv_into(conn, conn.frames.space()))
            answer, n = got
            if n > len(view):
                raise ProtocolError(f"answer of {n} bytes for a buffer of {len(view)}")
            received = conn.frames.take(view[:n])
            while received < n:
                received += await self._recv_into(conn, view[received:n])
            return answer, n
        except (OSError, ProtocolError) as e:
            raise TransportError(f"{self.address}: {e}") from None

    async def _recv_into(self, conn: _Connection, view: memoryview) -> int:
        n = await conn.recv_into(view)
        if n == 0:
            raise TransportError(f"{self.address} closed the connection")
        return n

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
