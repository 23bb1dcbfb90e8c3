"""The block servers of one push job (flash servers, peer nodes), as the client asks them for pieces.

A piece goes to the servers the plan names for its block, in order, each reached with the
secret it authenticates with. A server that does not hold the block, or whose copy is
corrupt, passes it on to the next; one that cannot be reached, breaks the connection
(killed mid-run), or refuses the transform (not enabled there, or an older server) is not
asked again in this job, and why is noted once. A piece no server answered is the client's
to transform (`answer` returns None).
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aifs.flash.requests import TRANSFORM
from aifs.push.pieces import Piece
from aifs.push.serving import NEED_TOKENIZER
from aifs.push.tokenize import Tokenize
from aifs.push.transforms import Transform
from aifs.rdma.auth import AuthError, Secret
from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address, BlockMissing, RemoteError, TransportError
from aifs.rdma.wire import CORRUPT, TAG_BYTES, frame

STREAMS = 2  # sockets per server


class PieceAnswer:
    """A piece as a server (or the client) answered it: head and tail raw, the records between transformed."""

    def __init__(self, header: dict[str, Any], data: bytes | bytearray | memoryview) -> None:
        head, result = header["head"], header["result"]
        view = memoryview(data)
        self.head = bytes(view[:head])
        self.result = bytes(view[head:head + result])
        self.tail = bytes(view[head + result:head + result + header["tail"]])
        self.whole = bool(header["whole"])


@dataclass(frozen=True, slots=True)
class Reach:
    """How the client reaches one server: what notes call it, and the secret it authenticates."""

    kind: str
    secret: Secret


class PushServers:
    def __init__(self, servers: Mapping[str, Reach], timeout: float, transform: Transform,
                 note: Callable[[str], None]) -> None:
        self._servers = dict(servers)
        self._timeout = timeout
        self._job = {"name": transform.name, "args": transform.args()}
        self._tokenizer = transform.spec if isinstance(transform, Tokenize) else None
        self._note = note
        self._lock = threading.Lock()
        self._connections: dict[str, TcpConnection] = {}
        self._given_up: set[str] = set()
        self.moved = 0  # bytes sent to the servers and received from them

    def answer(self, piece: Piece) -> PieceAnswer | None:
        for name, key in piece.places:
            if name in self._given_up or name not in self._servers:
                continue
            try:
                return self._ask(name, key, piece)
            except BlockMissing:
                continue
            except RemoteError as e:
                if e.code != CORRUPT:
                    self._give_up(name, f"it refused the job: {e}")
            except (TransportError, AuthError) as e:
                self._give_up(name, f"it did not answer: {e}")
        return None

    def _ask(self, name: str, key: int, piece: Piece) -> PieceAnswer:
        request = {"op": TRANSFORM, "id": key, "off": piece.object_offset, "len": piece.length,
                   "job": self._job}
        try:
            return self._call(name, request, None)
        except RemoteError as e:
            if e.code != NEED_TOKENIZER or self._tokenizer is None:
                raise
            return self._call(name, request, self._tokenizer)

    def _call(self, name: str, request: dict[str, Any], payload: bytes | None) -> PieceAnswer:
        sent = len(frame(request, len(payload or b""))) + TAG_BYTES + len(payload or b"")
        with self._lock:
            self.moved += sent
        answer, data, n = self._connection(name).call(request, memoryview(payload) if payload else None,
                                                      timeout=self._timeout)
        with self._lock:
            self.moved += len(frame(answer, n)) + n
        return PieceAnswer(answer, data[:n] if data is not None else b"")

    def _connection(self, name: str) -> TcpConnection:
        with self._lock:
            if name not in self._connections:
                self._connections[name] = TcpConnection(Address.parse(name), STREAMS, self._timeout,
                                                        secret=self._servers[name].secret)
            return self._connections[name]

    def _give_up(self, name: str, why: str) -> None:
        with self._lock:
            if name in self._given_up:
                return
            self._given_up.add(name)
        self._note(f"{self._servers[name].kind} {name}: {why}; its pieces go to other copies or are transformed here")

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
