"""The TCP wire format: length-prefixed msgpack headers, each followed by raw payload bytes.

A frame is PREFIX (header length, payload length), a msgpack map, then the
payload. Block bytes travel as the payload, never inside msgpack, so they are
received straight into the caller's buffer and sent from the server's buffer
with one `sendmsg`. Every request carries a request id (`rid`) that its answer
repeats, so requests from many threads pipeline on one socket. On an
authenticated connection each request's header is followed by a tag of
TAG_BYTES (see `auth`), checked before the header is even decoded.
"""

import struct
from collections.abc import Callable
from typing import Any

import msgpack

PREFIX = struct.Struct("<IQ")
MAX_HEADER = 1 << 16
MAX_PAYLOAD = 1 << 30
TAG_BYTES = 32  # an HMAC-SHA256

# Operations.
GET, PUT, DELETE, HAS, STAT, UNPIN = "get", "put", "del", "has", "stat", "unpin"
QP, LOCATE = "qp", "locate"  # verbs: key exchange, and where a block sits in registered memory

# Error codes in answers ({"err": code, "msg": text}).
MISSING = "missing"        # the server does not hold the block
CHECKSUM = "checksum"      # a put whose bytes do not match its checksum
CORRUPT = "corrupt"        # the stored copy failed its checksum; the server dropped it
FULL = "full"              # no room even after evicting every unpinned block
NO_VERBS = "noverbs"       # the server has no RDMA device
TOO_LARGE = "toolarge"     # the block does not fit a registered slot
LIMIT = "limit"            # a put larger than the server's largest block or its request memory
AUTH = "auth"              # the peer did not authenticate; the server closes the connection
BUSY = "busy"              # the server has as many connections as it takes; it closes this one
REFUSED = "refused"        # a request this server does not serve (a mount's server for its peers: pins, deletes)
BAD_REQUEST = "bad"

SMALL_BUFFER = 4 << 10

Check = Callable[[memoryview, memoryview], None]


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def frame(header: dict[str, Any], payload_len: int = 0) -> bytes:
    """The prefix and header of a frame; the payload follows as separate buffers."""
    packed = msgpack.packb(header)
    return PREFIX.pack(len(packed), payload_len) + packed


class FrameReader:
    """Splits a byte stream into frames without doing I/O itself (so sync and async loops share it).

    Bytes land in one reusable buffer through `space()`/`filled()`. `header()`
    returns the next header once it is complete; the payload that follows is
    then moved into the caller's memory with `take()` (the part already
    buffered) and direct `recv_into` calls for the rest. The buffer starts at
    `size` bytes, grows only while a header needs more, and shrinks back once
    it is empty, so an idle connection holds little memory.

    With `check` set, every header is followed by a tag: `check(prefix and header,
    tag)` runs before the header is decoded and raises to refuse the frame.
    """

    def __init__(self, size: int = SMALL_BUFFER) -> None:
        self._size = size
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._need = 0  # bytes the frame being read needs in the buffer, when more than it has
        self.check: Check | None = None

    def space(self) -> memoryview:
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buf) > self._size and not self._need:
                self._resize(self._size)
        if self._need > len(self._buf):
            self._resize(self._need)
        elif self._end == len(self._buf) or self._start + self._need > len(self._buf):
            self._compact()
        return self._view[self._end:]

    def _compact(self) -> None:
        pending = self._end - self._start
        self._view[:pending] = self._view[self._start:self._end]
        self._start, self._end = 0, pending

    def _resize(self, size: int) -> None:
        pending = bytes(self._view[self._start:self._end])
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._view[:len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def filled(self, n: int) -> None:
        self._end += n

    def header(self) -> tuple[dict[str, Any], int] | None:
        """(header, payload length) of the next frame, or None until more bytes arrive."""
        available = self._end - self._start
        if available < PREFIX.size:
            return None
        header_len, payload_len = PREFIX.unpack_from(self._buf, self._start)
        if header_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
            raise ProtocolError(f"frame of {header_len}+{payload_len} bytes is over the limit")
        tag_len = TAG_BYTES if self.check is not None else 0
        begin, end = self._start + PREFIX.size, self._start + PREFIX.size + header_len
        if available < PREFIX.size + header_len + tag_len:
            self._need = PREFIX.size + header_len + tag_len
            return None
        self._need = 0
        if self.check is not None:
            self.check(self._view[self._start:end], self._view[end:end + tag_len])
        try:
            header = msgpack.unpackb(self._view[begin:end])
        except (ValueError, msgpack.UnpackException) as e:
            raise ProtocolError(f"undecodable header: {str(e) or type(e).__name__}") from None
        if not isinstance(header, dict):
            raise ProtocolError("a header must be a map")
        self._start = end + tag_len
        return header, payload_len

    def take(self, dest: memoryview) -> int:
        """Move already-buffered payload bytes into `dest`; returns how many."""
        n = min(len(dest), self._end - self._start)
        dest[:n] = self._view[self._start:self._start + n]
        self._start += n
        return n


def remaining(buffers: list[memoryview], sent: int) -> list[memoryview]:
    """The buffers still to send after a partial `sendmsg` of `sent` bytes."""
    while sent:
        if sent >= len(buffers[0]):
            sent -= len(buffers[0])
            buffers = buffers[1:]
        else:
            buffers = [buffers[0][sent:], *buffers[1:]]
            sent = 0
    return buffers
