"""The control channel of a running mount against malformed input: random bytes, wrong
types, huge announced lengths, truncated frames. Each gets an error reply or a closed
connection, never the end of the mount: after every burst the mount still answers
`status` and file I/O through the mountpoint.

Every burst is sent on a fresh connection whose sending side is then shut, so the mount
must answer what it can and close its end; a mount that hung on a connection would fail
the burst by the socket's timeout.

AIFS_FUZZ_EXAMPLES=N runs more examples per strategy.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aifs.control import SOCKET_NAME
from aifs.control.client import ControlClient
from aifs.control.wire import MAX_MESSAGE

EXAMPLES = int(os.environ.get("AIFS_FUZZ_EXAMPLES", "60"))
REPLY_TIMEOUT_S = 30.0
OPS = ["status", "sync", "file_state", "pin", "unpin", "warmup", "resident", "locate", "prefetch_hint", "prefetch_end",
       "prefetch_status"]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def frame(body: bytes, announced: int | None = None) -> bytes:
    return struct.pack(">I", len(body) if announced is None else announced) + body


def request(message: object) -> bytes:
    return frame(msgpack.packb(message))


def _receive(sock: socket.socket) -> bytes:
    """The next bytes, or none once the mount closed its end: a mount that closes a
    connection with bytes of ours unread resets it, after the replies it sent."""
    try:
        return sock.recv(1 << 16)
    except ConnectionResetError:
        return b""


def exchange(volume, data: bytes) -> list[dict]:
    """Send `data` on a new control connection, shut the sending side, and read until the
    mount closes its end; every reply must be a well-formed frame holding a map."""
    received = bytearray()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(REPLY_TIMEOUT_S)
        sock.connect(str(volume.state_dir / SOCKET_NAME))
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the mount closed early (a frame it refused): its reply is still there to read
        while chunk := _receive(sock):
            received += chunk
    replies = []
    while received:
        assert len(received) >= 4, f"a truncated reply: {bytes(received)!r}"
        (length,) = struct.unpack(">I", received[:4])
        assert len(received) >= 4 + length, "a reply shorter than its header says"
        reply = msgpack.unpackb(bytes(received[4:4 + length]))
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
        replies.append(reply)
        del received[:4 + length]
    return replies


def assert_error(reply: dict, *words: str) -> None:
    assert reply["ok"] is False and isinstance(reply["error"], str), reply
    for word in words:
        assert word in reply["error"], reply


def assert_alive(volume) -> None:
    """The mount answers a status request and reads back a file just written through it."""
    report = ControlClient(volume.state_dir, timeout=REPLY_TIMEOUT_S).call("status")
    assert "tiers" in report, report
    data = os.urandom(70_000)
    path = Path(volume.path) / "alive.bin"
    path.write_bytes(data)
    assert path.read_bytes() == data


@pytest.fixture(scope="module")
def fuzzed(make_volume):
    volume = make_volume("fuzz")
    if not volume.is_mount:
        pytest.skip("needs a real aifs mount (AIFS_TEST_TARGET=local)")
    (Path(volume.path) / "data").mkdir()
    for i in range(3):
        (Path(volume.path) / "data" / f"f{i}").write_bytes(os.urandom(100_000))
    return volume


def test_a_bad_msgpack_byte_gets_an_error(fuzzed, watchdog):
    replies = exchange(fuzzed, frame(b"\xc1"))  # 5 bytes; 0xc1 is never used by msgpack
    assert len(replies) == 1
    assert_error(replies[0], "msgpack")
    assert_alive(fuzzed)


def test_an_unhashable_op_gets_an_error(fuzzed, watchdog):
    replies = exchange(fuzzed, request({"op": ["x"]}))
    assert len(replies) == 1
    assert_error(replies[0], "op")
    assert_alive(fuzzed)


@pytest.mark.parametrize("message, words", [
    ({"op": "no-such-op"}, ["unknown control operation", "status"]),
    ({"op": "status", "args": {"extra": 1}}, ["bad arguments for status", "extra"]),
    ({"op": "pin", "args": {"inodes": [1], "tier": "s3"}}, ["bad arguments for pin", "tier"]),
    ({"op": "sync", "args": {"inodes": "1"}}, ["bad arguments for sync", "inodes"]),
    ({"op": "sync", "args": {"inodes": [-1]}}, ["bad arguments for sync", "inodes"]),
    ({"op": "file_state", "args": {"ino": True}}, ["bad arguments for file_state", "ino"]),
    ({"op": "status", "args": {1: 2}}, []),
    ({"op": "status", "args": [1]}, ["args"]),
    ({"op": "status", "stray": 0}, ["stray"]),
    ([1, 2, 3], ["map"]),
])
def test_wrong_shapes_and_types_get_errors(fuzzed, watchdog, message, words):
    replies = exchange(fuzzed, request(message))
    assert len(replies) == 1
    assert_error(replies[0], *words)
    assert_alive(fuzzed)


def test_a_failing_handler_answers_with_its_error(fuzzed, watchdog):
    replies = exchange(fuzzed, request({"op": "file_state", "args": {"ino": 2**63}}))
    assert len(replies) == 1
    assert_error(replies[0])
    assert replies[0]["errno"], replies[0]
    assert_alive(fuzzed)


def test_an_oversized_frame_gets_an_error_and_the_connection_closes(fuzzed, watchdog):
    status = request({"op": "status"})
    replies = exchange(fuzzed, frame(b"", announced=MAX_MESSAGE + 1) + status)
    assert len(replies) == 1, "the status request after the oversized frame must not be read"
    assert_error(replies[0], "larger than")
    assert_alive(fuzzed)


@pytest.mark.parametrize("data", [
    b"\x00\x00",                                    # half a header
    frame(b"\x81\xa2op", announced=100),            # a body cut short
    request({"op": "status"}) + b"\x00\x00\x00",    # a good request, then half a header
])
def test_truncated_frames_just_close_the_connection(fuzzed, watchdog, data):
    replies = exchange(fuzzed, data)
    assert all(r["ok"] for r in replies), replies  # only a complete request is answered
    assert_alive(fuzzed)


def test_many_requests_on_one_connection_are_answered_in_turn(fuzzed, watchdog):
    replies = exchange(fuzzed, request({"op": "status"}) + frame(b"\xc1") + request({"op": "status"}))
    assert [r["ok"] for r in replies] == [True, False, True]


@given(data=st.binary(max_size=300))
@FUZZ
def test_random_bytes(fuzzed, watchdog, data):
    exchange(fuzzed, data)
    assert_alive(fuzzed)


@given(bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=5))
@FUZZ
def test_random_bodies_in_good_frames(fuzzed, watchdog, bodies):
    replies = exchange(fuzzed, b"".join(frame(body) for body in bodies))
    assert len(replies) == len(bodies)
    assert_alive(fuzzed)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(),
                    st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
arg_names = st.sampled_from(["inodes", "ino", "tier", "wait", "reader", "skip", "self", "args", "x"])
messages = st.one_of(
    values,
    st.fixed_dictionaries({"op": values}),
    st.fixed_dictionaries({"op": st.sampled_from(OPS), "args": values}),
    st.fixed_dictionaries({"op": st.sampled_from(OPS), "args": st.dictionaries(arg_names, values, max_size=3)}),
)


@given(batch=st.lists(messages, min_size=1, max_size=4))
@FUZZ
def test_random_messages(fuzzed, watchdog, batch):
    replies = exchange(fuzzed, b"".join(request(message) for message in batch))
    assert len(replies) == len(batch)
    assert_alive(fuzzed)


@given(announced=st.integers(0, 2**32 - 1), sent=st.binary(max_size=64))
@FUZZ
def test_announced_lengths_that_lie(fuzzed, watchdog, announced, sent):
    replies = exchange(fuzzed, frame(sent, announced=announced))
    if announced > MAX_MESSAGE:
        assert len(replies) == 1
        assert_error(replies[0], "larger than")
    assert_alive(fuzzed)
