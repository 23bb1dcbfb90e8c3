"""A non-blocking socket driven by trio's readiness waits, for the block protocol's hot paths.

Every call on a trio socket passes through the scheduler, even when the kernel
could take or give the bytes at once. For a small block request that is several
trips per round trip, a sizeable share of its latency on a busy node. Here an
operation that can complete at once does; only one that would block waits for
readiness (a cancellation point, like any trio wait). Use one from a single trio
run; close it on that run (trio is told first, so no waiter is left behind).
"""

import socket

import trio

from aifs.rdma.wire import remaining


class LoopSocket:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock

    @classmethod
    def adopt(cls, conn: trio.socket.SocketType) -> "LoopSocket":
        """Take over the descriptor of a trio socket (an accepted connection)."""
        return cls(socket.socket(conn.family, conn.type, conn.proto, fileno=conn.detach()))

    async def sendmsg(self, buffers: list[memoryview]) -> None:
        """All of `buffers`, in order."""
        while buffers:
            try:
                buffers = remaining(buffers, self.sock.sendmsg(buffers))
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)

    async def recv_into(self, view: memoryview) -> int:
        """Some bytes into `view` (0: the peer closed the connection)."""
        while True:
            try:
                return self.sock.recv_into(view)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    def close(self) -> None:
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()
