"""One connection to a mount's data socket: a request out, its reply and descriptors back."""

import array
import os
import select
import socket

from aifs.bypass.board import BoardView
from aifs.bypass.changes import ChangeView
from aifs.bypass.protocol import MAX_FDS, VERSION
from aifs.client.answers import Answers
from aifs.client.segments import SegmentFiles
from aifs.control.wire import HEADER, ProtocolError, body_length, decode, encode

_FD_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
_FIRST_READ = 256 << 10  # most replies arrive in one read into a buffer of this size


class Refused(Exception):
    """The server would not take the request (another protocol version, a bad request)."""


class Connection:
    def __init__(self, socket_path: bytes, timeout: float) -> None:
        """Raises OSError when nothing answers at `socket_path`."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.segments = SegmentFiles()
        self.answers: Answers | None = None  # once the first reply has handed over the change table
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(socket_path)
            self._hangup = select.poll()
            self._hangup.register(self.sock, select.POLLIN)
        except OSError:
            self.sock.close()
            raise

    def exchange(self, paths: list[bytes]) -> dict:
        """The reply to a request for `paths`; the segments it hands over are kept in
        `segments`. Raises OSError or ProtocolError when the connection fails (it is then of no
        further use), Refused when the server refuses the request."""
        request_id = int.from_bytes(os.urandom(8), "little")
        self.sock.sendall(encode({"v": VERSION, "id": request_id, "paths": paths,
                                  "forget": self.segments.forgotten()}))
        body, fds = self._receive()
        try:
            reply = decode(body)
            if "error" in reply:
                raise Refused(reply["error"])
            if reply["id"] != request_id:
                raise ProtocolError("a reply to another request arrived (a connection shared by two processes?)")
            numbers = reply["segments"]
            shared = int(reply["changes"]) + int(reply["board"])  # the board comes only with the table
            well_formed = len(numbers) + shared == len(fds) and (reply["changes"] or not reply["board"])
            if not well_formed or (shared and self.answers is not None):
                raise ProtocolError(f"a reply names {len(numbers)} segments and {shared} shared tables "
                                    f"but carries {len(fds)} descriptors")
        except BaseException:
            _close_all(fds)
            raise
        if shared:
            self.answers = Answers(ChangeView(fds[0]), BoardView(fds[1]) if shared == 2 else None, self.segments)
        self.segments.received(numbers, fds[shared:])
        return reply

    def alive(self) -> bool:
        """False once the mount has closed its end (it stopped, or was killed): what it said
        no longer holds, since nothing keeps its change table up to date."""
        return not self._hangup.poll(0)  # no reply is ever pending here: anything seen is the end

    def _receive(self) -> tuple[memoryview, list[int]]:
        """One reply's body and the descriptors that rode on it. Only one request is ever in
        flight, so everything that arrives belongs to this reply."""
        buf = bytearray(_FIRST_READ)
        got, end, fds = 0, HEADER.size, []
        try:
            while got < end:
                n, ancillary, flags, _ = self.sock.recvmsg_into([memoryview(buf)[got:]], _FD_SPACE,
                                                                socket.MSG_CMSG_CLOEXEC)
                fds += _descriptors(ancillary)
                if flags & socket.MSG_CTRUNC:
                    raise ProtocolError("a reply carried more descriptors than a reply may")
                if n == 0:
                    raise ConnectionResetError("the mount closed the data socket")
                got += n
                if end == HEADER.size and got >= HEADER.size:
                    end += body_length(bytes(buf[:HEADER.size]))
                    buf.extend(bytes(max(0, end - len(buf))))
            if got != end:
                raise ProtocolError(f"{got - end} bytes arrived past the end of a reply")
        except BaseException:
            _close_all(fds)
            raise
        return memoryview(buf)[HEADER.size:end], fds

    def close(self) -> None:
        if self.answers is not None:
            self.answers.close()
        self.segments.close()
        self.sock.close()


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return list(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
