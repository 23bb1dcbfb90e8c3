"""A non-blocking socket driven by trio's readiness waits, for the block protocol's hot paths.

Every call on a trio socket passes through the scheduler, even when the kernel
could take or give the bytes at once. For a small block request that is several
trips per round trip, a sizeable share of its latency on a busy node. Here an
operation that can complete at once does; only one that would block waits for
readiness (a cancellation point, like any trio wait). Use one from a single trio
run; close it on that run (trio is told first, so no waiter is left behind).

With `stall` set, a wait that sees no progress for that many seconds raises
TimeoutError: a peer that stops reading or sending cannot hold the socket forever.
"""

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from aifs.rdma.wire import FrameReader, ProtocolError, remaining


class PeerClosed(ConnectionError):
    """The peer closed the connection."""


class LoopSocket:
    def __init__(self, sock: socket.socket, stall: float | None = None) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.stall = stall

    @classmethod
    def adopt(cls, conn: trio.socket.SocketType, stall: float | None = None) -> "LoopSocket":
        """Take over the descriptor of a trio socket (an accepted connection)."""
        return cls(socket.socket(conn.family, conn.type, conn.proto, fileno=conn.detach()), stall)

    async def _wait(self, ready: Callable[[Any], Awaitable[None]]) -> None:
        if self.stall is None:
            await ready(self.sock)
            return
        with trio.move_on_after(self.stall):
            await ready(self.sock)
            return
        raise TimeoutError(f"nothing sent or received for {self.stall:g}s")

    async def sendmsg(self, buffers: list[memoryview]) -> None:
        """All of `buffers`, in order."""
        while buffers:
            try:
                buffers = remaining(buffers, self.sock.sendmsg(buffers))
            except BlockingIOError:
                await self._wait(trio.lowlevel.wait_writable)

    async def recv_into(self, view: memoryview) -> int:
        """Some bytes into `view` (0: the peer closed the connection)."""
        while True:
            try:
                return self.sock.recv_into(view)
            except BlockingIOError:
                await self._wait(trio.lowlevel.wait_readable)

    async def _fill(self, view: memoryview) -> int:
        n = await self.recv_into(view)
        if n == 0:
            raise PeerClosed("the peer closed the connection")
        return n

    async def next_header(self, frames: FrameReader) -> tuple[dict[str, Any], int]:
        """The next frame's (header, payload length), reading as much as it takes."""
        while (got := frames.header()) is None:
            frames.filled(await self._fill(frames.space()))
        return got

    async def next_message(self, frames: FrameReader) -> dict[str, Any]:
        """The next frame, which must carry no payload (the handshake's)."""
        header, n = await self.next_header(frames)
        if n:
            raise ProtocolError("a handshake frame carries no payload")
        return header

    async def recv_payload(self, frames: FrameReader, dest: memoryview) -> None:
        """Exactly len(dest) payload bytes into `dest`: what `frames` holds, then the rest."""
        got = frames.take(dest)
        while got < len(dest):
            got += await self._fill(dest[got:])

    def stale(self) -> bool:
        """Whether an idle socket is no use any more: its peer hung up (an idle server closes
        it) or sent something nobody asked for."""
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    def hang_up(self) -> None:
        """End the connection both ways now; whoever waits on it wakes, and the owner closes it."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()
