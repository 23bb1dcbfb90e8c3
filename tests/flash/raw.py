"""The block protocol spoken by hand over a blocking socket, for tests that send what no real client would."""

from __future__ import annotations

import socket
from typing import Any

from aifs.rdma.auth import ClientHandshake, RequestMacs, Secret
from aifs.rdma.wire import FrameReader, frame


class RawClient:
    """One connection to a server: its hello read, authenticated when given a secret, then
    frames or bytes exactly as the test writes them."""

    def __init__(self, port: int, secret: Secret | None = None, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.frames = FrameReader()
        self.hello, _ = self.receive()
        self.macs: RequestMacs | None = None
        if secret is not None:
            handshake = ClientHandshake(secret, port)
            self.sock.sendall(frame(handshake.answer(self.hello)))
            self.macs = handshake.finish(self.receive()[0])

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def signed(self, header: dict[str, Any], payload_len: int = 0) -> bytes:
        """A request frame's prefix, header and tag, as the next request of this connection."""
        assert self.macs is not None
        return self.macs.seal(frame(header, payload_len))

    def request(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """One signed request and its answer."""
        self.send(self.signed(header, len(payload)) + payload)
        return self.receive()

    def receive(self) -> tuple[dict[str, Any], bytes]:
        """The next frame: (header, payload)."""
        while (got := self.frames.header()) is None:
            n = self.sock.recv_into(self.frames.space())
            if n == 0:
                raise ConnectionError("the server closed the connection")
            self.frames.filled(n)
        header, n = got
        payload = memoryview(bytearray(n))
        filled = self.frames.take(payload)
        while filled < n:
            got_now = self.sock.recv_into(payload[filled:])
            if got_now == 0:
                raise ConnectionError("the server closed the connection in a payload")
            filled += got_now
        return header, bytes(payload)

    def hung_up(self) -> bool:
        """Whether the server closes the connection (after any answers still on their way)."""
        try:
            while True:
                self.receive()
        except TimeoutError:
            return False
        except OSError:  # ConnectionError included
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
