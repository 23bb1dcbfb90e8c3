"""The CLI's side of the control channel, and finding the mount a path belongs to."""

import os
import socket
from pathlib import Path

from aifs.control import SOCKET_NAME
from aifs.control.wire import HEADER, body_length, decode, encode
from aifs.fuse.mountinfo import FSTYPE, MountEntry, mounts


class ControlError(Exception):
    """No mount answers, or the mount refused the request; the message says which."""


def mount_of(path: Path) -> MountEntry:
    """The aifs mount that holds `path` (the deepest mount above it must be aifs)."""
    target = os.path.realpath(path)
    best = None
    for entry in mounts():
        point = str(entry.mountpoint)
        if target == point or target.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) > len(str(best.mountpoint)):
                best = entry
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


class ControlClient:
    def __init__(self, state_dir: Path, timeout: float | None = None) -> None:
        self.socket_path = state_dir / SOCKET_NAME
        self.timeout = timeout

    @classmethod
    def for_path(cls, path: Path, timeout: float | None = None) -> "ControlClient":
        return cls(mount_of(path).state_dir, timeout)

    def call(self, op: str, **args) -> object:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.socket_path))
            except (FileNotFoundError, ConnectionRefusedError):
                raise ControlError(
                    f"no aifs mount is running for {self.socket_path.parent} (no answer on {self.socket_path})"
                ) from None
            sock.sendall(encode({"op": op, "args": args}))
            reply = decode(_receive_exactly(sock, body_length(_receive_exactly(sock, HEADER.size))))
        if not reply.get("ok"):
            raise ControlError(reply.get("error", "the mount refused the request"))
        return reply.get("result")
