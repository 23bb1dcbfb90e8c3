"""The TCP frame format: headers split anywhere in the byte stream, payloads moved into caller memory."""

from __future__ import annotations

import random

import msgpack
import pytest

from aifs.rdma.wire import PREFIX, SMALL_BUFFER, FrameReader, ProtocolError, frame, remaining


def feed(reader: FrameReader, data: bytes) -> None:
    space = reader.space()
    space[:len(data)] = data
    reader.filled(len(data))


def test_frames_come_out_whole_however_the_stream_is_cut():
    payloads = [random.Random(i).randbytes(i * 37) for i in range(20)]
    stream = b"".join(frame({"rid": i, "n": len(p)}, len(p)) + p for i, p in enumerate(payloads))
    rng = random.Random(5)
    reader = FrameReader(size=512)  # smaller than some payloads: they must bypass the buffer
    pos, got = 0, []
    while len(got) < len(payloads):
        header = reader.header()
        if header is None:
            step = min(rng.randint(1, 60), len(stream) - pos, len(reader.space()))
            feed(reader, stream[pos:pos + step])
            pos += step
            continue
        fields, n = header
        dest = memoryview(bytearray(n))
        filled = reader.take(dest)
        while filled < n:  # what a socket's recv_into would do for the rest
            step = min(rng.randint(1, 300), n - filled)
            dest[filled:filled + step] = stream[pos:pos + step]
            pos += step
            filled += step
        got.append((fields["rid"], bytes(dest)))
    assert got == list(enumerate(payloads)) and pos == len(stream)


def test_oversized_and_undecodable_headers_are_protocol_errors():
    reader = FrameReader()
    feed(reader, PREFIX.pack(1 << 20, 0))
    with pytest.raises(ProtocolError):
        reader.header()
    reader = FrameReader()
    feed(reader, PREFIX.pack(1, 0) + b"\xc1")  # 0xc1 is never valid msgpack
    with pytest.raises(ProtocolError):
        reader.header()
    reader = FrameReader()
    packed = msgpack.packb([1, 2])
    feed(reader, PREFIX.pack(len(packed), 0) + packed)
    with pytest.raises(ProtocolError):
        reader.header()


def test_remaining_after_partial_sends():
    buffers = [memoryview(b"abc"), memoryview(b"defgh")]
    assert [bytes(b) for b in remaining(buffers, 0)] == [b"abc", b"defgh"]
    assert [bytes(b) for b in remaining(buffers, 2)] == [b"c", b"defgh"]
    assert [bytes(b) for b in remaining(buffers, 3)] == [b"defgh"]
    assert [bytes(b) for b in remaining(buffers, 6)] == [b"gh"]
    assert remaining(buffers, 8) == []


def test_the_buffer_grows_for_a_large_header_and_shrinks_back_when_idle():
    reader = FrameReader()
    assert len(reader.space()) == SMALL_BUFFER
    big = frame({"rid": 1, "pad": "x" * (3 * SMALL_BUFFER)})
    pos = 0
    while (got := reader.header()) is None:
        space = reader.space()
        step = min(len(space), len(big) - pos, 1000)
        space[:step] = big[pos:pos + step]
        reader.filled(step)
        pos += step
    assert got[0]["pad"] == "x" * (3 * SMALL_BUFFER) and pos == len(big)
    assert len(reader.space()) == SMALL_BUFFER  # an idle connection holds only the small buffer
