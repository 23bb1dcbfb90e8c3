"""The CLI's side of the control channel, and finding the mount a path belongs to."""

import grp
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from aifs.control import SOCKET_NAME
from aifs.control.wire import HEADER, ProtocolError, body_length, decode, encode
from aifs.fuse.mountinfo import FSTYPE, MountEntry, mount_holding


class ControlError(Exception):
    """No mount answers, or the mount refused the request; the message says which."""


def mount_of(path: Path) -> MountEntry:
    """The aifs mount that holds `path` (the deepest mount above it must be aifs)."""
    best = mount_holding(os.path.realpath(path))
    if best is None or best.fstype != FSTYPE:
        raise ControlError(f"{path} is not on an aifs mount")
    return best


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ControlError("the mount closed the control connection")
        data += chunk
    return bytes(data)


def _group_of(path: Path) -> str | None:
    """The name (or id) of the group that owns `path`; None when this user cannot see it."""
    try:
        gid = os.stat(path).st_gid
    except OSError:
        return None
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


class ControlClient:
    def __init__(self, state_dir: Path, timeout: float | None = None) -> None:
        self.socket_path = state_dir / SOCKET_NAME
        self.timeout = timeout

    @classmethod
    def for_path(cls, path: Path, timeout: float | None = None) -> "ControlClient":
        return cls(mount_of(path).state_dir, timeout)

    def _connect(self, sock: socket.socket) -> None:
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise ControlError(
                f"no aifs mount is running for {self.socket_path.parent} (no answer on {self.socket_path})"
            ) from None
        except PermissionError:
            group = _group_of(self.socket_path)
            raise ControlError(
                f"permission denied on the control socket {self.socket_path}: it needs root or the "
                f"socket's group{f' ({group})' if group else ''}; run this as root or as a member of it"
            ) from None
        except OSError as e:
            raise ControlError(f"cannot reach the control socket {self.socket_path}: {e.strerror}") from None

    def call(self, op: str, **args) -> object:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            self._connect(sock)
            try:
                sock.sendall(encode({"op": op, "args": args}))
                reply = decode(_receive_exactly(sock, body_length(_receive_exactly(sock, HEADER.size))))
            except (OSError, ProtocolError) as e:
                raise ControlError(f"the control connection to {self.socket_path} failed: {e}") from None
        if not reply.get("ok"):
            raise ControlError(reply.get("error", "the mount refused the request"))
        return reply.get("result")

    def sync_reports(self, inodes: list[int]) -> Iterator[dict]:
        """`sync` with waiting, as bounded requests: each request waits a moment for uploads and
        reports what is still pending; the reports end with the one where nothing is."""
        while True:
            report = self.call("sync", inodes=inodes, wait=True)
            yield report
            if not report["pending_blocks"]:
                return

    def sync_wait(self, inodes: list[int]) -> dict:
        """Upload everything under these inodes to the durable tier; the last report."""
        for report in self.sync_reports(inodes):
            pass
        return report
