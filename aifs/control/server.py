"""The mount's side of the control channel: one request, one reply, per connection turn."""

import errno
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from aifs.control.wire import HEADER, ProtocolError, body_length, decode, encode
from aifs.errors import FsError

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[object]]


async def _receive_exactly(stream: trio.SocketStream, count: int) -> bytes | None:
    data = bytearray()
    while len(data) < count:
        chunk = await stream.receive_some(count - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class ControlServer:
    """Serves `{"op": name, "args": {...}}` requests with the registered handlers."""

    def __init__(self, socket_path: Path, handlers: dict[str, Handler]) -> None:
        self.socket_path = socket_path
        self.handlers = handlers

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
            while True:
                header = await _receive_exactly(stream, HEADER.size)
                if header is None:
                    return
                try:
                    body = await _receive_exactly(stream, body_length(header))
                    if body is None:
                        return
                    reply = await self._dispatch(decode(body))
                except ProtocolError as e:
                    reply = {"ok": False, "error": str(e)}
                await stream.send_all(encode(reply))

    async def _dispatch(self, request: dict) -> dict:
        handler = self.handlers.get(request.get("op"))
        if handler is None:
            return {"ok": False, "error": f"unknown control operation {request.get('op')!r}"}
        try:
            return {"ok": True, "result": await handler(**request.get("args", {}))}
        except FsError as e:
            return {"ok": False, "error": str(e), "errno": e.errno}
        except (TypeError, ValueError) as e:
            return {"ok": False, "error": f"bad arguments for {request['op']}: {e}", "errno": errno.EINVAL}
