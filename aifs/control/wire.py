"""Framing of control messages: a 4-byte big-endian length, then a msgpack map."""

import struct

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
        raise ProtocolError(f"control message of {length} bytes is larger than {MAX_MESSAGE}")
    return length


def decode(body: bytes) -> dict:
    message = msgpack.unpackb(body)
    if not isinstance(message, dict):
        raise ProtocolError("a control message must be a map")
    return message
