"""Where a mount serves its data socket ([fuse] bypass_socket), and binding it before the volume
opens, so that a path that cannot be served refuses the mount in one sentence."""

import errno
import hashlib
import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from aifs.config import Config
from aifs.errors import FsError

log = logging.getLogger(__name__)

RUN_DIR = Path("/run/aifs")
BACKLOG = 128


class BypassUnavailable(Exception):
    """The data socket cannot be served at its path; the message says what to do."""


def socket_path(config: Config) -> Path | None:
    """The socket's path, or None when the bypass is off. "auto" is a file in /run/aifs named
    after the state directory for a mount by root, and off for a mount by another user (who
    cannot create it there; a path of their own in the config turns it on)."""
    setting = config.fuse.bypass_socket
    if setting == "off" or (setting == "auto" and os.geteuid() != 0):
        return None
    if setting != "auto":
        return Path(setting)
    digest = hashlib.sha256(os.fsencode(config.volume.state_dir)).hexdigest()[:16]
    return RUN_DIR / f"bypass-{digest}.sock"


def advertised(config: Config) -> bytes:
    """The value of the mount root's user.aifs.bypass: where readers find the socket."""
    path = socket_path(config)
    if path is None:
        raise FsError(errno.ENODATA, "reads without FUSE are off for this mount ([fuse] bypass_socket)")
    return os.fsencode(path)


@dataclass
class Listening:
    """The bound data socket; closing it removes its file, unless that is no longer this socket's
    (a later mount of the volume bound its own there)."""

    sock: socket.socket
    path: Path
    inode: int

    def close(self) -> None:
        self.sock.close()
        try:
            if self.path.lstat().st_ino == self.inode:
                self.path.unlink()
        except FileNotFoundError:
            pass


def listen(config: Config) -> Listening | None:
    """A listening socket at the configured path (mode 0666: the server checks each request
    against the caller's permissions); None when the bypass is off."""
    path = socket_path(config)
    if path is None:
        if config.fuse.bypass_socket == "auto":
            log.info("reads without FUSE are off: a mount by a user other than root serves them only "
                     "at a path of its own ([fuse] bypass_socket)")
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        if config.fuse.bypass_socket == "auto":
            _make_run_dir()
        _clear_stale(path)
        sock.bind(os.fsencode(path))
        os.chmod(path, 0o666)
        sock.listen(BACKLOG)
        inode = path.lstat().st_ino
    except OSError as e:
        sock.close()
        raise BypassUnavailable(f"cannot serve reads without FUSE at {path}: {e.strerror or e}; set [fuse] "
                                "bypass_socket to a path where a socket can be made, or to \"off\"") from None
    log.info("reads without FUSE served at %s", path)
    return Listening(sock, path, inode)


def _make_run_dir() -> None:
    """/run/aifs, open to every user's search (their readers connect there), whatever the umask."""
    try:
        RUN_DIR.mkdir(mode=0o755)
    except FileExistsError:
        return
    os.chmod(RUN_DIR, 0o755)


def _clear_stale(path: Path) -> None:
    """Remove a socket left by a mount that was killed; a live one, or any other file, stays
    (and the bind fails, saying so)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, "a file that is not a socket is in the way")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(os.fsencode(path))
        except ConnectionRefusedError:
            path.unlink()
            return
    raise OSError(errno.EADDRINUSE, "another process serves this socket")
