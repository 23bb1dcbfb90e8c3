"""The data socket's server, on the mount's event loop beside the FUSE requests.

What a reader sends can never end the mount: a bad request gets an error reply and the
connection closes; a reader that goes away, or anything failing while one is served, closes
that connection alone (the reader then reads through the mount).
"""

import array
import logging
import socket
from pathlib import Path

import trio

from aifs.bypass.address import Listening
from aifs.bypass.board import AnswerBoard
from aifs.bypass.caller import Caller
from aifs.bypass.changes import ChangeTable
from aifs.bypass.protocol import MAX_REQUEST_BYTES
from aifs.bypass.session import Session, refusal
from aifs.control.wire import HEADER, ProtocolError, body_length, receive_exactly
from aifs.vfs.volume import Volume

log = logging.getLogger(__name__)


class BypassServer:
    def __init__(self, listening: Listening, volume: Volume, mountpoint: Path) -> None:
        self._listening = listening
        self.vol = volume
        self.mountpoint = mountpoint

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; then the socket's file goes (before the volume lock does)."""
        sock = trio.socket.from_stdlib_socket(self._listening.sock)
        changes = ChangeTable()
        size = self.vol.config.fuse.bypass_answers
        board = AnswerBoard(size) if size else None
        self.vol.meta.kv.listen(changes.changed)
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    conn, _ = await sock.accept()
                    nursery.start_soon(self._serve_one, conn, changes, board)
        finally:
            self._listening.close()
            self.vol.meta.kv.forget(changes.changed)
            changes.close()
            if board is not None:
                board.close()

    async def _serve_one(self, conn: trio.socket.SocketType, changes: ChangeTable, board: AnswerBoard | None) -> None:
        with conn:
            try:
                caller = Caller.of(conn)
                session = Session(self.vol, caller, self.mountpoint, changes, board if caller.is_root else None)
                await self._converse(conn, session)
            except OSError as e:
                log.debug("a reader of the data socket went away: %s", e)
            except Exception:  # noqa: BLE001 - one reader's failure must not end the mount
                log.exception("serving a reader of the data socket failed; its connection is closed")

    async def _converse(self, conn: trio.socket.SocketType, session: Session) -> None:
        while True:
            header = await receive_exactly(conn.recv, HEADER.size)
            if header is None:
                return
            try:
                body = await receive_exactly(conn.recv, _request_length(header))
                if body is None:
                    return
                reply, fds = await session.answer(body)
                await _send(conn, reply, fds)
            except ProtocolError as e:
                await _send(conn, refusal(e), [])
                return
            finally:
                session.segments.sent()


def _request_length(header: bytes) -> int:
    length = body_length(header)
    if length > MAX_REQUEST_BYTES:
        raise ProtocolError(f"a request of {length} bytes is larger than the limit of {MAX_REQUEST_BYTES}")
    return length


async def _send(conn: trio.socket.SocketType, data: bytes, fds: list[int]) -> None:
    """All of `data`, the descriptors riding on its first bytes."""
    view = memoryview(data)
    if fds:
        sent = await conn.sendmsg([view], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        view = view[sent:]
    while view:
        view = view[await conn.send(view):]
