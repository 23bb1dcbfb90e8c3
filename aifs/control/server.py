"""The mount's side of the control channel: one request, one reply, per connection turn.

What a peer sends can never end the mount: a malformed message gets an error reply
(aifs.control.dispatch), a frame announcing more than MAX_MESSAGE gets one and the
connection is closed, a truncated frame or a peer that hangs up closes the connection.
"""

import logging
import os
from pathlib import Path

import trio

from aifs.control.dispatch import Dispatcher, Handler, failure
from aifs.control.wire import HEADER, ProtocolError, body_length, encode, receive_exactly

log = logging.getLogger(__name__)


class ControlServer:
    """Serves `{"op": name, "args": {...}}` requests with the registered handlers."""

    def __init__(self, socket_path: Path, handlers: dict[str, Handler]) -> None:
        self.socket_path = socket_path
        self.dispatcher = Dispatcher(handlers)

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.socket_path.exists():
            self.socket_path.unlink()  # left by a mount that was killed; the volume lock is ours
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o660)
        sock.listen(16)
        listener = trio.SocketListener(sock)
        task_status.started()
        try:
            await trio.serve_listeners(self._serve_one, [listener])
        finally:
            self.socket_path.unlink(missing_ok=True)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await self._converse(stream)
            except trio.BrokenResourceError as e:
                log.debug("a control client went away: %s", e)

    async def _converse(self, stream: trio.SocketStream) -> None:
        while True:
            header = await receive_exactly(stream.receive_some, HEADER.size)
            if header is None:
                return
            try:
                length = body_length(header)
            except ProtocolError as e:
                await stream.send_all(encode(failure(f"{e}; closing the connection")))
                return
            body = await receive_exactly(stream.receive_some, length)
            if body is None:
                return
            await stream.send_all(await self.dispatcher.reply(body))
