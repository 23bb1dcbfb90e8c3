"""The control dispatcher on its own: a handler that fails in a way nobody planned for gives an
error reply (EIO) and a logged traceback, and bad arguments never reach a handler."""

import errno
import logging

import msgpack
import trio

from aifs.control.dispatch import Dispatcher
from aifs.control.wire import HEADER


def reply_to(dispatcher: Dispatcher, message: dict) -> dict:
    raw = trio.run(dispatcher.reply, msgpack.packb(message))
    (length,) = HEADER.unpack(raw[:HEADER.size])
    assert len(raw) == HEADER.size + length
    return msgpack.unpackb(raw[HEADER.size:])


def test_an_unexpected_exception_becomes_an_error_reply_with_a_logged_traceback(caplog):
    async def broken(count: int) -> dict:
        raise RuntimeError(f"bug after {count}")

    with caplog.at_level(logging.ERROR, logger="aifs.control.dispatch"):
        reply = reply_to(Dispatcher({"broken": broken}), {"op": "broken", "args": {"count": 3}})
    assert reply == {"ok": False, "errno": errno.EIO,
                     "error": "broken failed inside the mount (RuntimeError: bug after 3); its log has the details"}
    assert caplog.records[0].exc_info is not None


def test_arguments_are_checked_strictly_before_the_handler_runs():
    calls = []

    async def handler(inodes: list[int], wait: bool = False) -> dict:
        calls.append((inodes, wait))
        return {"done": True}

    dispatcher = Dispatcher({"h": handler})
    for args in ({"inodes": ["1"]}, {"inodes": [1], "wait": 1}, {"inodes": (1, "x")}, {"x": 1}, {}):
        reply = reply_to(dispatcher, {"op": "h", "args": args})
        assert reply["ok"] is False and reply["error"].startswith("bad arguments for h: "), reply
    assert calls == []
    assert reply_to(dispatcher, {"op": "h", "args": {"inodes": [1], "wait": True}}) == {"ok": True,
                                                                                        "result": {"done": True}}
    assert calls == [([1], True)]
