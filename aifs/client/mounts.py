"""Which aifs mount a path is on, and where that mount serves its data socket.

Paths are matched against /proc/self/mountinfo without a system call per path: the deepest mount
above a path's directory must be an aifs mount. A directory outside every aifs mount is looked
at once more through its real path (a symbolic link above the mountpoint leads into it).
"""

import os
import time

from aifs.bypass.protocol import XATTR
from aifs.fuse.mountinfo import FSTYPE, mounts

REFRESH_AFTER_S = 5.0  # a path on no known aifs mount rereads the table at most this often

Place = tuple[bytes, bytes]  # (mountpoint, path relative to it)


class MountTable:
    def __init__(self) -> None:
        self._mounts: list[tuple[bytes, bool]] = []  # (mountpoint, is aifs), deepest first
        self._loaded = float("-inf")
        self._dirs: dict[bytes, Place | None] = {}
        self._sockets: dict[bytes, bytes | None] = {}

    def place(self, path: bytes) -> Place | None:
        """(mountpoint, relative path) of an absolute, normalised path on an aifs mount; None
        for a path on anything else."""
        directory, _, name = path.rpartition(b"/")
        if directory not in self._dirs:
            self._dirs[directory] = self._place_dir(directory or b"/")
        found = self._dirs[directory]
        if found is None:
            return None
        mountpoint, relative = found
        return mountpoint, relative + b"/" + name if relative else name

    def _place_dir(self, directory: bytes) -> Place | None:
        found = self._match(directory)
        if found is None and time.monotonic() - self._loaded > REFRESH_AFTER_S:
            self._load()
            found = self._match(directory)
        if found is None:
            real = os.path.realpath(directory)
            found = self._match(real) if real != directory else None
        return found

    def _load(self) -> None:
        entries = [(os.fsencode(entry.mountpoint), entry.fstype == FSTYPE) for entry in mounts()]
        # A later line stacks on top of an earlier one at the same point: keep the last.
        deepest = dict(entries)
        self._mounts = sorted(deepest.items(), key=lambda item: len(item[0]), reverse=True)
        self._loaded = time.monotonic()
        self._dirs.clear()

    def _match(self, directory: bytes) -> Place | None:
        for mountpoint, is_aifs in self._mounts:
            if directory == mountpoint:
                return (mountpoint, b"") if is_aifs else None
            if directory.startswith(mountpoint.rstrip(b"/") + b"/"):
                return (mountpoint, directory[len(mountpoint):].lstrip(b"/")) if is_aifs else None
        return None

    def socket_of(self, mountpoint: bytes) -> bytes | None:
        """The data socket the mount names on its root (one request through the mount, kept);
        None when it serves none, or does not answer."""
        if mountpoint not in self._sockets:
            try:
                self._sockets[mountpoint] = os.getxattr(mountpoint, XATTR)
            except OSError:  # off, a mount that is gone: reads through the mount say what is wrong
                self._sockets[mountpoint] = None
        return self._sockets[mountpoint]

    def forget_socket(self, mountpoint: bytes) -> None:
        """Ask the mount again next time (it may have been mounted anew, with another socket)."""
        self._sockets.pop(mountpoint, None)
