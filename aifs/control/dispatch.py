"""From a control message to a reply: the request is checked against the handler's signature
before the handler runs, and nothing a request does ends the mount.

Handlers are typed coroutines; pydantic's `validate_call` (strict: no coercion) checks the
arguments a peer sent against those types, so a handler only ever sees what it declares.
"""

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, validate_call

from aifs.control.wire import ProtocolError, decode, encode
from aifs.errors import FsError

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[object]]
STRICT = ConfigDict(strict=True)


class Request(BaseModel):
    """`{"op": name, "args": {keyword: value}}`, nothing else."""

    model_config = ConfigDict(strict=True, extra="forbid")

    op: str
    args: dict[str, Any] = {}


def failure(message: str, code: int = errno.EINVAL) -> dict:
    return {"ok": False, "error": message, "errno": code}


def _errors(error: ValidationError) -> str:
    """pydantic's findings on one line: `where: what` for each."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}" for e in error.errors())


class Dispatcher:
    def __init__(self, handlers: dict[str, Handler]) -> None:
        self._handlers = {op: validate_call(handler, config=STRICT) for op, handler in handlers.items()}

    def _request(self, body: bytes) -> Request:
        try:
            request = Request.model_validate(decode(body))
        except ValidationError as e:
            raise ProtocolError(f'a control message is {{"op": name, "args": {{...}}}}: {_errors(e)}') from None
        if request.op not in self._handlers:
            raise ProtocolError(f"unknown control operation {request.op!r}; "
                                f"known: {', '.join(sorted(self._handlers))}")
        return request

    async def reply(self, body: bytes) -> bytes:
        """The encoded reply to one message; a malformed message or a failing handler gets an
        error reply, and an unexpected failure is logged with its traceback."""
        try:
            request = self._request(body)
        except ProtocolError as e:
            return encode(failure(str(e)))
        try:
            return encode({"ok": True, "result": await self._handlers[request.op](**request.args)})
        except ValidationError as e:
            return encode(failure(f"bad arguments for {request.op}: {_errors(e)}"))
        except FsError as e:
            return encode(failure(str(e), e.errno))
        except Exception as e:  # noqa: BLE001 - a request must never end the mount
            log.exception("control operation %s failed", request.op)
            return encode(failure(f"{request.op} failed inside the mount ({type(e).__name__}: {e}); "
                                  "its log has the details", errno.EIO))
