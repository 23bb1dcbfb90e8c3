"""One reader's connection to the data socket: its identity, the segment descriptors it holds,
and the answers to its requests."""

import errno
import os
from pathlib import Path
from typing import Annotated

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aifs.bypass.board import AnswerBoard
from aifs.bypass.caller import Caller
from aifs.bypass.changes import ChangeTable
from aifs.bypass.protocol import MAX_PATH_BYTES, MAX_PATHS, VERSION
from aifs.bypass.reply import Reply, Segments
from aifs.bypass.resolve import Fallback, Resolver, WalkedBefore
from aifs.control.wire import ProtocolError, decode, encode
from aifs.errors import FsError
from aifs.meta import Inode, keys
from aifs.vfs.volume import Volume

FAIR_SHARE = 16  # paths answered between turns of the event loop: FUSE requests wait no longer


class Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    v: int
    id: int
    paths: list[Annotated[bytes, Field(max_length=MAX_PATH_BYTES)]] = Field(max_length=MAX_PATHS)
    forget: list[int] = []


def parse(body: bytes) -> Request:
    try:
        request = Request.model_validate(decode(body))
    except ValidationError as e:
        raise ProtocolError(f"not a data socket request: {e.errors()[0]['msg']} at "
                            f"{'.'.join(map(str, e.errors()[0]['loc']))}") from None
    if request.v != VERSION:
        raise ProtocolError(f"this mount speaks version {VERSION} of the data socket, not {request.v}")
    return request


class Session:
    def __init__(self, volume: Volume, caller: Caller, mountpoint: Path, changes: ChangeTable,
                 board: AnswerBoard | None) -> None:
        """`board`: where this caller's answers that may be kept are posted for its kind (root)."""
        self.vol = volume
        self.caller = caller
        self.segments = Segments()
        self.changes = changes
        self.board = board
        self._walked = WalkedBefore(changes)
        self._changes_sent = False
        self._refusal = self._refusal_for(mountpoint)

    def _refusal_for(self, mountpoint: Path) -> dict | None:
        """The one answer to all of this caller's paths, when the mount itself stops them: without
        allow_other the kernel lets only the mount's owner in; directories above the mountpoint
        that the caller cannot search are the kernel's to judge."""
        if not self.vol.config.fuse.allow_other and self.caller.uid != os.getuid():
            return {"errno": errno.EACCES}
        if not self.caller.reaches(mountpoint):
            return {"fallback": "the directories above the mountpoint are closed to this user"}
        return None

    async def answer(self, body: bytes) -> tuple[bytes, list[int]]:
        """The encoded reply to a request, and the descriptors to send with it (the caller closes
        them through `self.segments.sent()` once sent); raises ProtocolError for a bad request."""
        request = parse(body)
        self.segments.held.difference_update(request.forget)
        if not self._changes_sent:  # the first reply hands over the change table, and the board
            self.segments.fds += [os.dup(shared.fd) for shared in (self.changes, self.board) if shared is not None]
        reply = Reply(self.vol, self.segments, self.caller.is_root)
        files = []
        for start in range(0, len(request.paths), FAIR_SHARE):
            if start:
                await trio.lowlevel.checkpoint()
            since = self.changes.sequence()  # before this turn reads anything: stamps are from here
            resolver = Resolver(self.vol.meta, self.caller, self.vol.cluster is not None, self._walked, since)
            files += [self._answer(path, resolver, reply, since) for path in request.paths[start:start + FAIR_SHARE]]
        await reply.fill()
        message = {"v": VERSION, "id": request.id, "block_size": self.vol.meta.block_size, "files": files,
                   "segments": self.segments.new, "changes": not self._changes_sent,
                   "board": not self._changes_sent and self.board is not None}
        self._changes_sent = True
        return encode(message), self.segments.fds

    def _answer(self, path: bytes, resolver: Resolver, reply: Reply, since: int) -> dict:
        if self._refusal is not None:
            return self._refusal
        if reply.full:
            return {"again": True}
        try:
            ino, node, read = resolver.file(path)
            answer = reply.add_file(ino, node)
        except FsError as e:
            return {"errno": e.errno}
        except Fallback as e:
            return {"fallback": str(e)}
        self._stamp(answer, ino, node, read, since)
        if "stamp" in answer and self.board is not None:
            self.board.post(path, answer, self.vol.meta.block_size)
        return answer

    def _stamp(self, answer: dict, ino: int, node: Inode, read: list[bytes], since: int) -> None:
        """Let the reader reuse an answer while nothing it was built from changes: one whose
        blocks it reads from segments itself, on a volume of this node alone or of a frozen
        file (on a shared volume an open asks the engine afresh; a frozen file never changes)."""
        if not all("segment" in block for block in answer["blocks"]):
            return
        if self.vol.cluster is not None and not node.frozen:
            return
        count = -(-node.size // self.vol.meta.block_size)
        stamp = self.changes.stamp(since, read + [keys.block(ino, i) for i in range(count)])
        if stamp is not None:
            answer["stamp"] = stamp


def refusal(error: ProtocolError) -> bytes:
    """The reply to a request the server cannot take; the connection closes after it."""
    return encode({"v": VERSION, "error": str(error)})
