"""Framing of control messages: a 4-byte big-endian length, then a msgpack map."""

import struct
from collections.abc import Awaitable, Callable

import msgpack

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 << 20


class ProtocolError(Exception):
    """The peer sent something that is not a control message."""


def encode(message: dict) -> bytes:
    body = msgpack.packb(message)
    return HEADER.pack(len(body)) + body


def body_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"a control message of {length} bytes is larger than the limit of {MAX_MESSAGE}")
    return length


def decode(body: bytes) -> dict:
    """The map in `body`; every way msgpack can fail on bad bytes is a ValueError."""
    try:
        message = msgpack.unpackb(body)
    except ValueError as e:
        raise ProtocolError(f"a control message must be msgpack: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"a control message must be a map, not {type(message).__name__}")
    return message


async def receive_exactly(receive: Callable[[int], Awaitable[bytes]], count: int) -> bytes | None:
    """`count` bytes from `receive` (a stream's or a socket's), or None when the peer closes
    its end first."""
    data = bytearray()
    while len(data) < count:
        chunk = await receive(count - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)
